// ranges: etcd's Go client v3.7.3 against two servers, for RangeStream.
//
//	ranges compare ETCD_ENDPOINT KV_ENDPOINT
//	    Makes the same history on both (fresh single-member servers), then
//	    asks both a table of ranges, each by Range and by RangeStream
//	    merged as the client merges it. On each server the merged stream
//	    must equal Range (header included); across the servers the answers
//	    must be equal but for the header's cluster, member and term, and
//	    errors must have the same code and message. Ends with
//	    "cases=N mismatches=M" and exits 1 on any mismatch.
//	ranges time ENDPOINT MODE
//	    One timed read of every key (FromKey "\x00"), serializable, for
//	    the scale benchmark. MODE is range100k (the first 100,000 keys),
//	    list (pages of 500 after the last key, at the first page's
//	    revision, as kube-apiserver lists), keys (keys-only), count
//	    (count-only), stream (RangeStream, chunks counted and dropped),
//	    whole (every key and value in one Range, which prints "whole
//	    seconds=S refused: CODE "MESSAGE"" when the server refuses it) or
//	    cancel (a RangeStream cancelled after 100,000 keys, then a
//	    count-only range: "cancel seconds=S keys=K pages=P, then count N
//	    in S s"). Prints "MODE seconds=S keys=K pages=P" and checks count
//	    and more (and, for a stream, that every key comes once, in order). With
//	    RANGES_LIST_SECONDS set, a list that takes longer stops after the
//	    page that passes it and prints "list stopped seconds=S keys=K of
//	    N pages=P" (a server that cannot finish at the scale asked).
package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

func main() {
	if len(os.Args) == 4 && os.Args[1] == "compare" {
		os.Exit(compare(os.Args[2], os.Args[3]))
	}
	if len(os.Args) == 4 && os.Args[1] == "time" {
		os.Exit(timed(os.Args[2], os.Args[3]))
	}
	if len(os.Args) == 3 && os.Args[1] == "fill" {
		cli := dial(os.Args[2], "", "")
		fmt.Printf("filled to revision %d\n", fillForInterrupt(cli))
		os.Exit(0)
	}
	if len(os.Args) == 3 && os.Args[1] == "streams" {
		fmt.Println(streamsEqualRanges(dial(os.Args[2], "", "")))
		os.Exit(0)
	}
	if len(os.Args) == 4 && os.Args[1] == "interrupt" {
		os.Exit(interrupt(os.Args[2], os.Args[3]))
	}
	fmt.Fprintln(os.Stderr, "usage: ranges compare ETCD KV | ranges time ENDPOINT MODE | ranges fill ENDPOINT | ranges streams ENDPOINT | ranges interrupt ETCD KV")
	os.Exit(2)
}

func dial(endpoint, user, password string) *clientv3.Client {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 5 * time.Second,
		Username:    user,
		Password:    password,
		// clientv3's default: the server's send limit decides.
		MaxCallRecvMsgSize: math.MaxInt32,
		Logger:             zap.NewNop(),
	})
	if err != nil {
		fail("dial %s: %v", endpoint, err)
	}
	return cli
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "ranges: "+format+"\n", args...)
	os.Exit(2)
}

func ctx() context.Context {
	return ctxWithin(60 * time.Second)
}

// timedReadDeadline bounds one timed read of every key: at ten million
// keys a keys-only range or a stream takes etcd well over the minute
// that bounds every other call here.
const timedReadDeadline = 30 * time.Minute

func ctxWithin(limit time.Duration) context.Context {
	c, cancel := context.WithTimeout(context.Background(), limit)
	time.AfterFunc(limit+time.Second, cancel)
	return c
}

// history writes the same keys, overwrites, a delete, a leased key and a
// compaction on a fresh server.
func history(cli *clientv3.Client) {
	for i := 0; i < 25; i++ {
		must(cli.Put(ctx(), fmt.Sprintf("k%02d", i), fmt.Sprintf("v%d", i)))
	}
	must(cli.Put(ctx(), "k05", "again"))
	must(cli.Delete(ctx(), "k07"))
	must(cli.Put(ctx(), "k07", "reborn"))
	lease := pb.NewLeaseClient(cli.ActiveConnection())
	if _, err := lease.LeaseGrant(ctx(), &pb.LeaseGrantRequest{TTL: 3600, ID: 0x5eed}); err != nil {
		fail("lease grant: %v", err)
	}
	must(cli.Put(ctx(), "k24", "leased", clientv3.WithLease(0x5eed)))
	must(cli.Compact(ctx(), 10, clientv3.WithCompactPhysical()))
}

func must[T any](_ T, err error) {
	if err != nil {
		fail("%v", err)
	}
}

type rangeCase struct {
	name string
	key  string
	opts []clientv3.OpOption
}

// etcd 3.7.3 sorts each chunk of a stream with a sort target but no
// order, so past its first chunk its stream differs from its Range;
// kv-server's stream must give the Range answer for these cases.
var etcdStreamSortsChunks = map[string]bool{
	"create target, no order":          true,
	"value target, no order, limit 10": true,
}

func cases() []rangeCase {
	all := func(extra ...clientv3.OpOption) []clientv3.OpOption {
		return append([]clientv3.OpOption{clientv3.WithRange("l")}, extra...)
	}
	c := []rangeCase{
		{"single key", "k03", nil},
		{"missing key", "nope", nil},
		{"from key", "k2", []clientv3.OpOption{clientv3.WithFromKey()}},
		{"prefix", "k1", []clientv3.OpOption{clientv3.WithPrefix()}},
		{"empty range", "a", []clientv3.OpOption{clientv3.WithRange("b")}},
		{"every key", "\x00", []clientv3.OpOption{clientv3.WithFromKey()}},
	}
	for _, limit := range []int64{0, 1, 5, 10, 11, 24, 25, 100} {
		c = append(c, rangeCase{fmt.Sprintf("limit %d", limit), "k00", all(clientv3.WithLimit(limit))})
	}
	for _, rev := range []int64{10, 12, 26, 27, 29} {
		c = append(c,
			rangeCase{fmt.Sprintf("revision %d", rev), "k00", all(clientv3.WithRev(rev))},
			rangeCase{fmt.Sprintf("revision %d limit 7", rev), "k00", all(clientv3.WithRev(rev), clientv3.WithLimit(7))})
	}
	c = append(c,
		rangeCase{"keys-only", "k00", all(clientv3.WithKeysOnly())},
		rangeCase{"keys-only limit 12", "k00", all(clientv3.WithKeysOnly(), clientv3.WithLimit(12))},
		rangeCase{"keys-only revision 26", "k00", all(clientv3.WithKeysOnly(), clientv3.WithRev(26))},
		rangeCase{"count-only", "k00", all(clientv3.WithCountOnly())},
		rangeCase{"count-only limit 1", "k00", all(clientv3.WithCountOnly(), clientv3.WithLimit(1))},
		rangeCase{"serializable", "k00", all(clientv3.WithSerializable(), clientv3.WithLimit(13))},
		rangeCase{"ascending by key", "k00", all(clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend), clientv3.WithLimit(3))},
		rangeCase{"create target, no order", "k00", all(clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortNone))},
		rangeCase{"value target, no order, limit 10", "k00", all(clientv3.WithSort(clientv3.SortByValue, clientv3.SortNone), clientv3.WithLimit(10))},
		rangeCase{"version target, no order, limit 3", "k00", all(clientv3.WithSort(clientv3.SortByVersion, clientv3.SortNone), clientv3.WithLimit(3))},
		rangeCase{"descending", "k00", all(clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend))},
		rangeCase{"ascending by mod", "k00", all(clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortAscend))},
		rangeCase{"min mod revision", "k00", all(clientv3.WithMinModRev(20))},
		rangeCase{"compacted revision", "k00", all(clientv3.WithRev(5))},
		rangeCase{"future revision", "k00", all(clientv3.WithRev(1000))},
		rangeCase{"empty key", "", nil},
	)
	return c
}

// answer is one way of asking, normalized for comparison across servers.
type answer struct {
	response *pb.RangeResponse
	err      string
}

func (a answer) String() string {
	if a.err != "" {
		return "error " + a.err
	}
	return fmt.Sprintf("%v", a.response)
}

func errorText(err error) string {
	if s, ok := status.FromError(err); ok {
		return fmt.Sprintf("%s: %s", s.Code(), s.Message())
	}
	return err.Error()
}

func ask(cli *clientv3.Client, c rangeCase, stream bool) answer {
	if !stream {
		resp, err := cli.Get(ctx(), c.key, c.opts...)
		if err != nil {
			return answer{err: errorText(err)}
		}
		return answer{response: (*pb.RangeResponse)(resp)}
	}
	ch, err := cli.GetStream(ctx(), c.key, c.opts...)
	if err != nil {
		return answer{err: errorText(err)}
	}
	resp, err := clientv3.GetStreamToGetResponse(ch)
	if err != nil {
		return answer{err: errorText(err)}
	}
	return answer{response: (*pb.RangeResponse)(resp)}
}

// acrossServers drops what differs between two clusters' headers.
func acrossServers(a answer) answer {
	if a.response == nil {
		return a
	}
	r := proto.Clone(a.response).(*pb.RangeResponse)
	if r.Header != nil {
		r.Header.ClusterId, r.Header.MemberId, r.Header.RaftTerm = 0, 0, 0
	}
	return answer{response: r}
}

func same(a, b answer) bool {
	if a.err != "" || b.err != "" {
		return a.err == b.err
	}
	return proto.Equal(a.response, b.response)
}

func compare(etcdEndpoint, kvEndpoint string) int {
	servers := map[string]*clientv3.Client{"etcd": dial(etcdEndpoint, "", ""), "kv-server": dial(kvEndpoint, "", "")}
	for _, cli := range servers {
		history(cli)
	}
	mismatches, total := 0, 0
	report := func(name, what string, a, b answer) {
		mismatches++
		fmt.Printf("MISMATCH %s: %s\n  %s\n  %s\n", name, what, a, b)
	}
	for _, c := range cases() {
		total++
		got := map[string][2]answer{}
		for name, cli := range servers {
			got[name] = [2]answer{ask(cli, c, false), ask(cli, c, true)}
		}
		for name, pair := range got {
			streamable := !strings.HasPrefix(pair[1].err, "Unimplemented")
			if name == "etcd" && etcdStreamSortsChunks[c.name] {
				continue
			}
			if streamable && !same(pair[0], pair[1]) {
				report(c.name, name+": stream differs from range", pair[0], pair[1])
			}
		}
		for i, how := range []string{"range", "stream"} {
			expected := got["etcd"][i]
			if etcdStreamSortsChunks[c.name] {
				expected = got["etcd"][0]
			}
			e, k := acrossServers(expected), acrossServers(got["kv-server"][i])
			if !same(e, k) {
				report(c.name, how+": kv-server differs from etcd", e, k)
			}
		}
		if resp := got["kv-server"][1].response; resp != nil && strings.HasPrefix(c.name, "keys-only") {
			for _, kv := range resp.Kvs {
				if kv.Lease != 0 || len(kv.Value) != 0 {
					report(c.name, "keys-only carries a value or lease", got["kv-server"][1], answer{})
				}
			}
		}
	}
	// 25 keys come in more than one chunk (the first holds ten), as etcd's.
	for name, cli := range servers {
		total++
		ch, err := cli.GetStream(ctx(), "k00", clientv3.WithRange("l"))
		chunks := 0
		for err == nil {
			chunk, ok := <-ch
			if !ok {
				break
			}
			err = chunk.Err()
			chunks++
		}
		if err != nil || chunks < 2 {
			report("chunks", fmt.Sprintf("%s: %d chunks for 25 keys", name, chunks), answer{err: fmt.Sprint(err)}, answer{})
		}
	}
	mismatches += comparePermissions(etcdEndpoint, kvEndpoint, &total)
	fmt.Printf("cases=%d mismatches=%d\n", total, mismatches)
	if mismatches > 0 {
		return 1
	}
	return 0
}

// comparePermissions turns auth on in both servers with a user who may
// read [k00, k10) only, and compares a permitted and a denied stream.
func comparePermissions(etcdEndpoint, kvEndpoint string, total *int) int {
	mismatches := 0
	answers := map[string][2]answer{}
	for name, endpoint := range map[string]string{"etcd": etcdEndpoint, "kv-server": kvEndpoint} {
		cli := dial(endpoint, "", "")
		must(cli.UserAdd(ctx(), "root", "rootpw"))
		must(cli.UserGrantRole(ctx(), "root", "root"))
		must(cli.RoleAdd(ctx(), "reader"))
		must(cli.RoleGrantPermission(ctx(), "reader", "k00", "k10", clientv3.PermissionType(clientv3.PermRead)))
		must(cli.UserAdd(ctx(), "alice", "alicepw"))
		must(cli.UserGrantRole(ctx(), "alice", "reader"))
		must(cli.AuthEnable(ctx()))
		cli.Close()
		alice := dial(endpoint, "alice", "alicepw")
		answers[name] = [2]answer{
			ask(alice, rangeCase{"permitted", "k00", []clientv3.OpOption{clientv3.WithRange("k10")}}, true),
			ask(alice, rangeCase{"denied", "k00", []clientv3.OpOption{clientv3.WithRange("l")}}, true),
		}
		alice.Close()
	}
	for i, name := range []string{"permitted stream", "denied stream"} {
		*total++
		e, k := acrossServers(answers["etcd"][i]), acrossServers(answers["kv-server"][i])
		if !same(e, k) {
			mismatches++
			fmt.Printf("MISMATCH %s: kv-server differs from etcd\n  %s\n  %s\n", name, e, k)
		}
	}
	if !strings.Contains(answers["kv-server"][1].err, "permission denied") {
		mismatches++
		fmt.Printf("MISMATCH denied stream: not refused: %s\n", answers["kv-server"][1])
	}
	return mismatches
}

// listLimit is how long a timed list may run (RANGES_LIST_SECONDS), or
// 0 for no limit.
func listLimit() time.Duration {
	seconds, err := strconv.Atoi(os.Getenv("RANGES_LIST_SECONDS"))
	if err != nil || seconds <= 0 {
		return 0
	}
	return time.Duration(seconds) * time.Second
}

func timed(endpoint, mode string) int {
	cli := dial(endpoint, "", "")
	start := time.Now()
	keys, pages := int64(0), 0
	opts := []clientv3.OpOption{clientv3.WithFromKey(), clientv3.WithSerializable()}
	check := func(ok bool, what string, args ...any) {
		if !ok {
			fail(mode+": "+what, args...)
		}
	}
	switch mode {
	case "range100k":
		resp, err := cli.Get(ctx(), "\x00", append(opts, clientv3.WithLimit(100000))...)
		check(err == nil, "%v", err)
		keys, pages = int64(len(resp.Kvs)), 1
	case "keys", "count":
		opt := clientv3.WithKeysOnly()
		if mode == "count" {
			opt = clientv3.WithCountOnly()
		}
		resp, err := cli.Get(ctxWithin(timedReadDeadline), "\x00", append(opts, opt)...)
		check(err == nil, "%v", err)
		keys, pages = resp.Count, 1
		check(mode == "count" || int64(len(resp.Kvs)) == resp.Count, "%d keys, count %d", len(resp.Kvs), resp.Count)
	case "list":
		key, rev, total := "\x00", int64(0), int64(-1)
		limit := listLimit()
		for {
			resp, err := cli.Get(ctx(), key, append(opts, clientv3.WithLimit(500), clientv3.WithRev(rev))...)
			check(err == nil, "page %d: %v", pages, err)
			if total < 0 {
				total, rev = resp.Count, resp.Header.Revision
			}
			check(resp.Count == total-keys, "page %d: count %d, expected %d", pages, resp.Count, total-keys)
			keys += int64(len(resp.Kvs))
			pages++
			check(resp.More == (keys < total), "page %d: more %v with %d of %d", pages, resp.More, keys, total)
			if !resp.More {
				break
			}
			if limit > 0 && time.Since(start) > limit {
				fmt.Printf("list stopped seconds=%.3f keys=%d of %d pages=%d\n", time.Since(start).Seconds(), keys, total, pages)
				return 0
			}
			key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		}
	case "whole":
		// Every key in one answer: at ten million keys of 256 bytes, over
		// gRPC's send limit, which etcd answers with ResourceExhausted.
		resp, err := cli.Get(ctxWithin(timedReadDeadline), "\x00", opts...)
		if err != nil {
			s, _ := status.FromError(err)
			fmt.Printf("whole seconds=%.3f refused: %s %q\n", time.Since(start).Seconds(), s.Code(), s.Message())
			return 0
		}
		keys, pages = int64(len(resp.Kvs)), 1
	case "cancel":
		return cancelOne(cli, start, opts)
	case "stream":
		ch, err := cli.GetStream(ctxWithin(timedReadDeadline), "\x00", opts...)
		check(err == nil, "%v", err)
		var last *mvccpb.KeyValue
		for chunk := range ch {
			check(chunk.Err() == nil, "%v", chunk.Err())
			// Every key once, in order, across the chunks.
			for _, kv := range chunk.Kvs {
				if last != nil {
					check(bytes.Compare(last.Key, kv.Key) < 0, "key %q after %q", kv.Key, last.Key)
				}
				last = kv
			}
			keys += int64(len(chunk.Kvs))
			pages++
			if chunk.Header != nil {
				check(chunk.Count == keys, "count %d, streamed %d", chunk.Count, keys)
			}
		}
		check(last != nil || keys == 0, "no keys")
	default:
		fail("unknown mode %q", mode)
	}
	fmt.Printf("%s seconds=%.3f keys=%d pages=%d\n", mode, time.Since(start).Seconds(), keys, pages)
	return 0
}

// cancelAfterKeys is how far a timed stream of every key is read before
// the client cancels it: a few of a server's windows, far from the end
// at any size the timed reads are run at.
const cancelAfterKeys = 100000

// cancelOne reads a RangeStream of every key until cancelAfterKeys have
// come, cancels it, and times a count-only range of every key after it:
// the server must let the stream go and answer on.
func cancelOne(cli *clientv3.Client, start time.Time, opts []clientv3.OpOption) int {
	c, cancel := context.WithCancel(context.Background())
	ch, err := cli.GetStream(c, "\x00", opts...)
	if err != nil {
		fail("cancel: %v", err)
	}
	keys, pages := int64(0), 0
	for keys < cancelAfterKeys {
		chunk, ok := <-ch
		if !ok || chunk.Err() != nil {
			fail("cancel: chunk %d: open %v, %v", pages, ok, chunk.Err())
		}
		keys += int64(len(chunk.Kvs))
		pages++
		if chunk.Header != nil {
			break
		}
	}
	cancel()
	for range ch {
	}
	streamed := time.Since(start)
	counted := time.Now()
	resp, err := cli.Get(ctxWithin(timedReadDeadline), "\x00", append(opts, clientv3.WithCountOnly())...)
	if err != nil {
		fail("cancel: count after: %v", err)
	}
	fmt.Printf("cancel seconds=%.3f keys=%d pages=%d, then count %d in %.3f s\n",
		streamed.Seconds(), keys, pages, resp.Count, time.Since(counted).Seconds())
	return 0
}

// Streams interrupted midway: keys written first, values of a KiB, so
// that a stream of them is far more than the chunks and windows a
// server reads ahead of a client.
const (
	interruptKeys     = 80000
	interruptValue    = 1024
	putsPerTxn        = 100
	cancelledStreams  = 20
	chunksBeforeBreak = 2
)

// interrupt runs, on each server (filled first by `ranges fill`),
// RangeStreams the client cancels after a few chunks, then one a
// physical compaction past its revision overtakes after its first chunk. It prints one line per server and
// exits 1 unless both end the same way: every cancelled stream gone
// with the server still counting every key, and the overtaken stream
// ended by the same error.
func interrupt(etcdEndpoint, kvEndpoint string) int {
	lines := map[string]string{}
	for _, server := range []struct{ name, endpoint string }{{"etcd", etcdEndpoint}, {"kv-server", kvEndpoint}} {
		cli := dial(server.endpoint, "", "")
		lines[server.name] = fmt.Sprintf("%s; %s", cancelMidway(cli), compactMidway(cli))
		cli.Close()
		fmt.Printf("%s: %s\n", server.name, lines[server.name])
	}
	if lines["etcd"] != lines["kv-server"] {
		fmt.Println("MISMATCH interrupted streams")
		return 1
	}
	fmt.Println("interrupted streams end alike")
	return 0
}

// fillForInterrupt writes the keys in txns and returns the revision
// after them.
func fillForInterrupt(cli *clientv3.Client) int64 {
	value := strings.Repeat("v", interruptValue)
	var revision int64
	for start := 0; start < interruptKeys; start += putsPerTxn {
		ops := make([]clientv3.Op, 0, putsPerTxn)
		for i := start; i < start+putsPerTxn; i++ {
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("s%06d", i), value))
		}
		resp, err := cli.Txn(ctx()).Then(ops...).Commit()
		if err != nil {
			fail("fill: %v", err)
		}
		revision = resp.Header.Revision
	}
	return revision
}

// streamsEqualRanges asks for the keys by Range and by RangeStream,
// whole, under a limit and ascending by key under a limit: streams of
// many chunks, read by kv-server in many windows. Any difference fails.
func streamsEqualRanges(cli *clientv3.Client) string {
	cases := [][]clientv3.OpOption{
		{clientv3.WithPrefix()},
		{clientv3.WithPrefix(), clientv3.WithLimit(50001)},
		{clientv3.WithPrefix(), clientv3.WithLimit(30000), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend)},
	}
	for i, opts := range cases {
		a, b := ask(cli, rangeCase{key: "s", opts: opts}, false), ask(cli, rangeCase{key: "s", opts: opts}, true)
		if a.err != "" || b.err != "" {
			fail("case %d: range %q, stream %q", i, a.err, b.err)
		}
		if !same(a, b) {
			fail("case %d: stream differs from range: %d keys, count %d, more %v against %d keys, count %d, more %v",
				i, len(b.response.GetKvs()), b.response.GetCount(), b.response.GetMore(),
				len(a.response.GetKvs()), a.response.GetCount(), a.response.GetMore())
		}
	}
	return fmt.Sprintf("%d streams equal their ranges", len(cases))
}

// cancelMidway cancels streams after their first chunks, then counts.
func cancelMidway(cli *clientv3.Client) string {
	for i := 0; i < cancelledStreams; i++ {
		c, cancel := context.WithCancel(ctx())
		ch, err := cli.GetStream(c, "s", clientv3.WithPrefix())
		if err != nil {
			fail("stream %d: %v", i, err)
		}
		for n := 0; n < chunksBeforeBreak; n++ {
			chunk, ok := <-ch
			if !ok || chunk.Err() != nil || len(chunk.Kvs) == 0 {
				fail("stream %d, chunk %d: open %v, %v", i, n, ok, chunk.Err())
			}
		}
		cancel()
		// The client's reader closes the channel once the stream ends.
		for range ch {
		}
	}
	resp, err := cli.Get(ctx(), "s", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		fail("count after cancels: %v", err)
	}
	return fmt.Sprintf("%d streams cancelled, then count %d", cancelledStreams, resp.Count)
}

// compactMidway reads a stream at the current revision, compacts past
// it after the first chunk, and reads on: what the stream ends with.
func compactMidway(cli *clientv3.Client) string {
	now, err := cli.Get(ctx(), "s", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		fail("revision: %v", err)
	}
	revision := now.Header.Revision
	ch, err := cli.GetStream(ctx(), "s", clientv3.WithPrefix(), clientv3.WithRev(revision))
	if err != nil {
		fail("overtaken stream: %v", err)
	}
	first, ok := <-ch
	if !ok || first.Err() != nil {
		fail("overtaken stream's first chunk: open %v, %v", ok, first.Err())
	}
	put, err := cli.Put(ctx(), "t", "past the stream")
	if err != nil {
		fail("put: %v", err)
	}
	if _, err := cli.Compact(ctx(), put.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		fail("compact: %v", err)
	}
	keys, end := int64(len(first.Kvs)), "no error"
	for chunk := range ch {
		if chunk.Err() != nil {
			end = errorText(chunk.Err())
			break
		}
		keys += int64(len(chunk.Kvs))
	}
	if end == "no error" && keys != interruptKeys {
		end = fmt.Sprintf("no error after %d of %d keys", keys, interruptKeys)
	}
	return "overtaken stream ended with " + end
}
