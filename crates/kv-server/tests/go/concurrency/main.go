// Command concurrency drives etcd's server-side Lock (v3lockpb) and
// Election (v3electionpb) gRPC services through a cluster's members, the
// checks of etcd's own tests for them (tests/integration
// v3lock_grpc_test.go, v3election_grpc_test.go, v3_election_test.go and
// the concurrency recipes' mutex tests) made into one deterministic run.
// It prints one line per step: what the step saw. Every step also checks
// what it saw, and the command exits with status 1 at the first surprise.
//
// Nothing printed depends on timing or identity: lease ids, revisions and
// cluster ids appear only as relations ("key lock-a/<lease A hex>",
// "waiter rev > holder rev"). Errors are printed as the gRPC status code
// and message received, since those must be equal between servers.
//
// What etcd 3.5.17 does, and so what the transcript pins (etcd's servers
// are thin wrappers over clientv3/concurrency on an in-process client):
//   - Lock puts name/<lease hex> (empty value, on the lease) and waits for
//     every older key under name/ to go; a waiter's header is from its
//     final Get, after the holder's delete. The same lease locks again at
//     once. Unlock is a plain Delete of any key, existing or not.
//   - Lease 0 in Lock or Campaign makes the server grant a 60 s lease it
//     never keeps alive; the key and LeaderKey use that lease.
//   - Errors the in-process client returns lose their gRPC code: a lease
//     that does not exist (never granted, revoked, expired, -1) gives
//     Unknown "etcdserver: requested lease not found", not NotFound, and
//     Unlock of an empty key Unknown "etcdserver: key is not provided".
//     The services' own errors are Unknown too: "election: no leader",
//     "election: not leader", "\"leader\" field must be provided",
//     "mutex: session is expired" (a Lock waiter whose key went while it
//     waited, once those before it go).
//   - Campaign's header is its first txn's, even for a waiter that won
//     later. Proclaim and Resign only compare the given key's create
//     revision: the name is ignored, a wrong or stale key makes Proclaim
//     fail but Resign succeed doing nothing, and a waiter may proclaim or
//     resign its own key; a waiter whose key is gone still "wins".
//   - Observe sends the current leader's kv first (or, with no leader,
//     waits for one), then every put of that key, repeats included, and
//     on its deletion the next leader; waiters' puts are not sent.
//
// Usage: concurrency -endpoints 127.0.0.1:2379[,127.0.0.1:2389,...]
// Calls are spread over the members (holder, waiter and observer on
// different members when there are three).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3election/v3electionpb"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
	"go.uber.org/zap"
	"google.golang.org/grpc/status"
)

const (
	// Bounds the whole run; on loopback it takes about 13 s, most of it
	// waiting for two short leases to expire.
	runTimeout = 60 * time.Second
	// Bounds one call that must answer at once.
	rpcTimeout = 5 * time.Second
	// How long a call that must block is watched for not returning.
	quiet = 300 * time.Millisecond
	// How long a blocked call may take to return once it is released.
	wake = 5 * time.Second
	// How long a short lease may take to expire: its TTL (shortTTL, above
	// etcd's 2 s minimum), one keep-alive the server's own session may
	// send when it takes the lease, and the revoke's commit.
	expiry = 20 * time.Second
	// TTL of leases that must outlive the run.
	longTTL = 60
	// TTL of leases left to expire.
	shortTTL = 3
	// A lease id nobody grants.
	unknownLease = 0x1234abcd5678
)

var ctx context.Context

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "concurrency: "+format+"\n", args...)
	os.Exit(1)
}

func must(err error, what string) {
	if err != nil {
		fail("%s: %v", what, err)
	}
}

// expect prints a step's result and checks it.
func expect(step, got, want string) {
	fmt.Printf("%s: %s\n", step, got)
	if got != want {
		fail("%s: got %q, want %q", step, got, want)
	}
}

// errText is how a call ended: "ok", or the gRPC status it returned.
func errText(err error) string {
	if err == nil {
		return "ok"
	}
	if s, ok := status.FromError(err); ok {
		return fmt.Sprintf("error code=%s message=%q", s.Code(), s.Message())
	}
	return "error (not a gRPC status) " + err.Error()
}

// member is one endpoint's client and the two services on its connection.
type member struct {
	cli   *clientv3.Client
	lock  v3lockpb.LockClient
	elect v3electionpb.ElectionClient
}

func connect(endpoint string) *member {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	must(err, "connect "+endpoint)
	conn := cli.ActiveConnection()
	return &member{cli: cli, lock: v3lockpb.NewLockClient(conn), elect: v3electionpb.NewElectionClient(conn)}
}

func call() (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, rpcTimeout)
}

func grant(m *member, ttl int64) int64 {
	c, cancel := call()
	defer cancel()
	resp, err := m.cli.Grant(c, ttl)
	must(err, "grant")
	return int64(resp.ID)
}

func revoke(m *member, lease int64) {
	c, cancel := call()
	defer cancel()
	_, err := m.cli.Revoke(c, clientv3.LeaseID(lease))
	must(err, "revoke")
}

func grantedTTL(m *member, lease int64) int64 {
	c, cancel := call()
	defer cancel()
	resp, err := m.cli.TimeToLive(c, clientv3.LeaseID(lease))
	must(err, "time to live")
	return resp.GrantedTTL
}

// get is key's kv, or nil when it does not exist.
func get(m *member, key string) *mvccpb.KeyValue {
	c, cancel := call()
	defer cancel()
	resp, err := m.cli.Get(c, key)
	must(err, "get "+key)
	if len(resp.Kvs) == 0 {
		return nil
	}
	return resp.Kvs[0]
}

// under is every kv under prefix, oldest created first.
func under(m *member, prefix string) []*mvccpb.KeyValue {
	c, cancel := call()
	defer cancel()
	resp, err := m.cli.Get(c, prefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	must(err, "get "+prefix)
	return resp.Kvs
}

// settle polls until key exists (or is gone) and says which it saw.
func settle(m *member, key string, present bool, within time.Duration) string {
	deadline := time.Now().Add(within)
	for {
		kv := get(m, key)
		if (kv != nil) == present || time.Now().After(deadline) {
			if kv == nil {
				return "absent"
			}
			return "present"
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// keyOf is the key Lock and Campaign make: name/<lease in hex>.
func keyOf(name string, lease int64) string {
	return fmt.Sprintf("%s/%x", name, lease)
}

// shape names key after the lease it should be made from, or shows it.
func shape(key []byte, name string, lease int64, label string) string {
	if string(key) == keyOf(name, lease) {
		return fmt.Sprintf("%s/<lease %s hex>", name, label)
	}
	return fmt.Sprintf("unexpected %q", key)
}

type result[T any] struct {
	v   T
	err error
}

// async runs f in the background; its result arrives on the channel.
func async[T any](f func() (T, error)) <-chan result[T] {
	ch := make(chan result[T], 1)
	go func() {
		v, err := f()
		ch <- result[T]{v, err}
	}()
	return ch
}

// waiting says whether ch stays silent for quiet.
func waiting[T any](ch <-chan result[T]) string {
	select {
	case r := <-ch:
		return "returned early: " + errText(r.err)
	case <-time.After(quiet):
		return "still waiting"
	}
}

// await is what arrives on ch within d.
func await[T any](ch <-chan result[T], d time.Duration, what string) result[T] {
	select {
	case r := <-ch:
		return r
	case <-time.After(d):
		fail("%s: nothing within %v", what, d)
	}
	panic("unreachable")
}

func lockOn(m *member, name string, lease int64, timeout time.Duration) func() (*v3lockpb.LockResponse, error) {
	return func() (*v3lockpb.LockResponse, error) {
		c, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return m.lock.Lock(c, &v3lockpb.LockRequest{Name: []byte(name), Lease: lease})
	}
}

func unlock(m *member, key []byte) string {
	c, cancel := call()
	defer cancel()
	_, err := m.lock.Unlock(c, &v3lockpb.UnlockRequest{Key: key})
	return errText(err)
}

// lockNow is a Lock that must return at once.
func lockNow(m *member, name string, lease int64) (*v3lockpb.LockResponse, error) {
	return lockOn(m, name, lease, rpcTimeout)()
}

// held describes a lock Lock returned: its key, and the key's kv.
func held(m *member, resp *v3lockpb.LockResponse, err error, name string, lease int64, label string) string {
	if err != nil {
		return errText(err)
	}
	kv := get(m, string(resp.Key))
	if kv == nil {
		return "key " + shape(resp.Key, name, lease, label) + " missing"
	}
	return fmt.Sprintf("key %s, on the lease %v, value empty %v, header rev %s key create rev",
		shape(resp.Key, name, lease, label), kv.Lease == lease, len(kv.Value) == 0,
		relation(resp.Header.Revision, kv.CreateRevision))
}

// lockKeys names kvs after the leases (label: id) they are made from.
func lockKeys(kvs []*mvccpb.KeyValue, name string, leases map[string]int64) string {
	var names []string
	for _, kv := range kvs {
		found := fmt.Sprintf("unexpected %q", kv.Key)
		for label, lease := range leases {
			if string(kv.Key) == keyOf(name, lease) {
				found = shape(kv.Key, name, lease, label)
			}
		}
		names = append(names, found)
	}
	return strings.Join(names, " ")
}

func main() {
	endpoints := flag.String("endpoints", "127.0.0.1:2379", "the members to use, comma-separated")
	flag.Parse()
	var cancel context.CancelFunc
	ctx, cancel = context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	// A step blocked outside ctx still ends the run.
	time.AfterFunc(runTimeout, func() { fail("run took longer than %v", runTimeout) })

	var members []*member
	for _, endpoint := range strings.Split(*endpoints, ",") {
		m := connect(endpoint)
		defer m.cli.Close()
		members = append(members, m)
	}
	a, b, c := members[0], members[1%len(members)], members[2%len(members)]

	lockChecks(a, b, c)
	electionChecks(a, b, c)
}

func lockChecks(a, b, c *member) {
	// TestV3LockLockWaiter: a waiter gets the lock once the holder unlocks.
	leaseA, leaseB := grant(a, longTTL), grant(a, longTTL)
	l1, err := lockNow(a, "lock-a", leaseA)
	expect("lock lock-a with lease A", held(a, l1, err, "lock-a", leaseA, "A"),
		"key lock-a/<lease A hex>, on the lease true, value empty true, header rev = key create rev")

	// TestMutexSessionRelock: the same lease locks again at once.
	again, err := lockNow(b, "lock-a", leaseA)
	if err == nil {
		expect("lock lock-a again with lease A", fmt.Sprintf("returns the same key %v", string(again.Key) == string(l1.Key)),
			"returns the same key true")
	} else {
		expect("lock lock-a again with lease A", errText(err), "ok")
	}

	waiter := async(lockOn(b, "lock-a", leaseB, 20*time.Second))
	expect("lock lock-a with lease B", waiting(waiter), "still waiting")
	wkv := present(c, keyOf("lock-a", leaseB))
	expect("waiter's key lock-a/<lease B hex>", fmt.Sprintf("exists %v, created after the holder's %v",
		wkv != nil, wkv != nil && wkv.CreateRevision > l1.Header.Revision), "exists true, created after the holder's true")

	expect("unlock holder's key", unlock(c, l1.Key), "ok")
	r := await(waiter, wake, "waiter after unlock")
	expect("waiter after unlock", held(b, r.v, r.err, "lock-a", leaseB, "B"),
		"key lock-a/<lease B hex>, on the lease true, value empty true, header rev > key create rev")
	expect("waiter's header rev > holder's header rev", fmt.Sprint(r.v.Header.Revision > l1.Header.Revision), "true")
	expect("holder's key after unlock", settle(c, string(l1.Key), false, 0), "absent")
	expect("unlock waiter's key", unlock(a, r.v.Key), "ok")
	expect("keys under lock-a/", fmt.Sprint(len(under(c, "lock-a/"))), "0")
	expect("unlock a key that does not exist", unlock(a, []byte("lock-a/nothing")), "ok")
	cx, cancel := call()
	_, err = a.cli.Put(cx, "plain-key", "v")
	cancel()
	must(err, "put plain-key")
	expect("unlock plain-key, not a lock", unlock(b, []byte("plain-key")), "ok")
	expect("plain-key after it", settle(c, "plain-key", false, 0), "absent")
	expect("unlock an empty key", unlock(a, nil), `error code=Unknown message="etcdserver: key is not provided"`)

	// A lease that does not exist, was revoked, or is -1.
	_, err = lockNow(a, "lock-x", unknownLease)
	expect("lock with a lease never granted", errText(err), `error code=Unknown message="etcdserver: requested lease not found"`)
	revoked := grant(a, longTTL)
	revoke(a, revoked)
	_, err = lockNow(b, "lock-x", revoked)
	expect("lock with a revoked lease", errText(err), `error code=Unknown message="etcdserver: requested lease not found"`)
	_, err = lockNow(b, "lock-x", -1)
	expect("lock with lease -1", errText(err), `error code=Unknown message="etcdserver: requested lease not found"`)
	expect("keys under lock-x/", fmt.Sprint(len(under(c, "lock-x/"))), "0")

	// Lease 0: the server grants a lease of its own for the key.
	zero, err := lockNow(a, "lock-zero", 0)
	if err != nil {
		expect("lock with lease 0", errText(err), "ok")
	}
	zkv := get(a, string(zero.Key))
	if zkv == nil {
		fail("lock with lease 0: key %q missing", zero.Key)
	}
	expect("lock with lease 0", fmt.Sprintf("%s, granted TTL %d",
		held(a, zero, nil, "lock-zero", zkv.Lease, "new"), grantedTTL(a, zkv.Lease)),
		"key lock-zero/<lease new hex>, on the lease true, value empty true, header rev = key create rev, granted TTL 60")
	revoke(a, zkv.Lease)
	expect("its key after revoking that lease", settle(a, string(zero.Key), false, wake), "absent")

	// A held lock goes with its lease: revoked.
	leaseC, leaseD := grant(a, longTTL), grant(a, longTTL)
	lc, err := lockNow(a, "lock-b", leaseC)
	expect("lock lock-b with lease C", held(a, lc, err, "lock-b", leaseC, "C"),
		"key lock-b/<lease C hex>, on the lease true, value empty true, header rev = key create rev")
	waiter = async(lockOn(b, "lock-b", leaseD, 20*time.Second))
	expect("lock lock-b with lease D", waiting(waiter), "still waiting")
	revoke(c, leaseC)
	r = await(waiter, wake, "waiter after revoke")
	expect("waiter after revoking lease C", held(b, r.v, r.err, "lock-b", leaseD, "D"),
		"key lock-b/<lease D hex>, on the lease true, value empty true, header rev > key create rev")
	expect("lease C's key", settle(c, string(lc.Key), false, 0), "absent")
	revoke(c, leaseD)

	// ... and expired: lease E is never kept alive.
	leaseE, leaseF := grant(a, shortTTL), grant(a, longTTL)
	le, err := lockNow(a, "lock-c", leaseE)
	expect("lock lock-c with short lease E", held(a, le, err, "lock-c", leaseE, "E"),
		"key lock-c/<lease E hex>, on the lease true, value empty true, header rev = key create rev")
	waiter = async(lockOn(b, "lock-c", leaseF, expiry+wake))
	expect("lock lock-c with lease F", waiting(waiter), "still waiting")
	r = await(waiter, expiry, "waiter after expiry")
	expect("waiter once lease E expired", held(b, r.v, r.err, "lock-c", leaseF, "F"),
		"key lock-c/<lease F hex>, on the lease true, value empty true, header rev > key create rev")
	expect("lease E's key", settle(c, string(le.Key), false, 0), "absent")
	revoke(c, leaseF)
	_, err = lockNow(c, "lock-x", leaseE)
	expect("lock with expired lease E", errText(err), `error code=Unknown message="etcdserver: requested lease not found"`)

	// TestMutexWaitsOnCurrentHolder: a waiter whose lease goes while it
	// waits gives up only when the holder unlocks, and the waiter behind
	// it waits for the holder, not for it.
	leaseG, leaseH, leaseI := grant(a, longTTL), grant(a, longTTL), grant(a, longTTL)
	lg, err := lockNow(a, "lock-d", leaseG)
	expect("lock lock-d with lease G", held(a, lg, err, "lock-d", leaseG, "G"),
		"key lock-d/<lease G hex>, on the lease true, value empty true, header rev = key create rev")
	victim := async(lockOn(b, "lock-d", leaseH, 20*time.Second))
	expect("lock lock-d with lease H", waiting(victim), "still waiting")
	expect("H's key", settle(b, keyOf("lock-d", leaseH), true, wake), "present")
	third := async(lockOn(c, "lock-d", leaseI, 20*time.Second))
	expect("lock lock-d with lease I", waiting(third), "still waiting")
	expect("I's key", settle(c, keyOf("lock-d", leaseI), true, wake), "present")
	expect("keys under lock-d/ in create order", lockKeys(under(a, "lock-d/"), "lock-d", map[string]int64{"G": leaseG, "H": leaseH, "I": leaseI}),
		"lock-d/<lease G hex> lock-d/<lease H hex> lock-d/<lease I hex>")
	revoke(a, leaseH)
	expect("H's key after revoking lease H", settle(a, keyOf("lock-d", leaseH), false, wake), "absent")
	expect("lock with lease H", waiting(victim), "still waiting")
	expect("lock with lease I", waiting(third), "still waiting")
	expect("unlock G's key", unlock(a, lg.Key), "ok")
	r = await(third, wake, "third after unlock")
	expect("lock with lease I after unlock", held(c, r.v, r.err, "lock-d", leaseI, "I"),
		"key lock-d/<lease I hex>, on the lease true, value empty true, header rev > key create rev")
	rv := await(victim, wake, "victim after unlock")
	expect("lock with lease H after unlock", errText(rv.err), `error code=Unknown message="mutex: session is expired"`)
	expect("unlock I's key", unlock(b, r.v.Key), "ok")

	// A waiter that gives up (its deadline passes) takes its key away.
	leaseJ, leaseK := grant(a, longTTL), grant(a, longTTL)
	lj, err := lockNow(a, "lock-e", leaseJ)
	expect("lock lock-e with lease J", held(a, lj, err, "lock-e", leaseJ, "J"),
		"key lock-e/<lease J hex>, on the lease true, value empty true, header rev = key create rev")
	rk := await(async(lockOn(b, "lock-e", leaseK, 500*time.Millisecond)), wake, "lock with a deadline")
	expect("lock lock-e with lease K, deadline 500ms", errText(rk.err), `error code=DeadlineExceeded message="context deadline exceeded"`)
	expect("K's key after the deadline", settle(a, keyOf("lock-e", leaseK), false, wake), "absent")
	expect("J's key", settle(a, string(lj.Key), true, 0), "present")
	expect("unlock J's key", unlock(c, lj.Key), "ok")
	revoke(a, leaseJ)
	revoke(a, leaseK)
	revoke(a, leaseA)
	revoke(a, leaseB)
	revoke(a, leaseG)
	revoke(a, leaseI)
}

func campaignOn(m *member, name string, lease int64, value string, timeout time.Duration) func() (*v3electionpb.CampaignResponse, error) {
	return func() (*v3electionpb.CampaignResponse, error) {
		c, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return m.elect.Campaign(c, &v3electionpb.CampaignRequest{Name: []byte(name), Lease: lease, Value: []byte(value)})
	}
}

// campaignNow is a Campaign that must return at once.
func campaignNow(m *member, name string, lease int64, value string) (*v3electionpb.CampaignResponse, error) {
	return campaignOn(m, name, lease, value, rpcTimeout)()
}

// elected describes what Campaign returned: its LeaderKey against the
// key it names.
func elected(m *member, resp *v3electionpb.CampaignResponse, err error, name string, lease int64, label string) string {
	if err != nil {
		return errText(err)
	}
	l := resp.Leader
	if l == nil {
		return "no leader key"
	}
	kv := get(m, string(l.Key))
	if kv == nil {
		return fmt.Sprintf("leader name %q, key %s, lease = lease %s %v, header rev %s rev, key missing",
			l.Name, shape(l.Key, name, lease, label), label, l.Lease == lease, relation(resp.Header.Revision, l.Rev))
	}
	return fmt.Sprintf("leader name %q, key %s, lease = lease %s %v, rev = key create rev %v, header rev %s rev, key on the lease %v, value %q",
		l.Name, shape(l.Key, name, lease, label), label, l.Lease == lease, l.Rev == kv.CreateRevision,
		relation(resp.Header.Revision, l.Rev), kv.Lease == lease, kv.Value)
}

// leader describes what Leader returns against the leader key it should be.
func leader(m *member, name string, want *v3electionpb.LeaderKey, label string) string {
	c, cancel := call()
	defer cancel()
	resp, err := m.elect.Leader(c, &v3electionpb.LeaderRequest{Name: []byte(name)})
	if err != nil {
		return errText(err)
	}
	kv := resp.Kv
	if kv == nil {
		return "no kv"
	}
	if want == nil {
		return fmt.Sprintf("unexpected key %q", kv.Key)
	}
	return fmt.Sprintf("key %s, value %q, create rev = leader rev %v, lease = leader lease %v",
		shape(kv.Key, name, want.Lease, label), kv.Value, kv.CreateRevision == want.Rev, kv.Lease == want.Lease)
}

func proclaim(m *member, l *v3electionpb.LeaderKey, value string) string {
	c, cancel := call()
	defer cancel()
	_, err := m.elect.Proclaim(c, &v3electionpb.ProclaimRequest{Leader: l, Value: []byte(value)})
	return errText(err)
}

func resign(m *member, l *v3electionpb.LeaderKey) string {
	c, cancel := call()
	defer cancel()
	_, err := m.elect.Resign(c, &v3electionpb.ResignRequest{Leader: l})
	return errText(err)
}

// with is a copy of l changed by change.
func with(l *v3electionpb.LeaderKey, change func(*v3electionpb.LeaderKey)) *v3electionpb.LeaderKey {
	copied := &v3electionpb.LeaderKey{Name: l.Name, Key: l.Key, Rev: l.Rev, Lease: l.Lease}
	change(copied)
	return copied
}

// observer is an Observe stream's messages, read in the background.
type observer struct {
	ch     chan result[*v3electionpb.LeaderResponse]
	cancel context.CancelFunc
	// name and labelled leases, to name the leaders it reports.
	name   string
	leases map[string]int64
}

func observe(m *member, name string, leases map[string]int64) *observer {
	c, cancel := context.WithTimeout(ctx, 40*time.Second)
	stream, err := m.elect.Observe(c, &v3electionpb.LeaderRequest{Name: []byte(name)})
	must(err, "observe "+name)
	o := &observer{ch: make(chan result[*v3electionpb.LeaderResponse], 100), cancel: cancel, name: name, leases: leases}
	go func() {
		for {
			resp, err := stream.Recv()
			o.ch <- result[*v3electionpb.LeaderResponse]{resp, err}
			if err != nil {
				return
			}
		}
	}()
	return o
}

// next is the next n messages: value@leader each, or how the stream ended.
func (o *observer) next(n int) string {
	var seen []string
	for i := 0; i < n; i++ {
		r := await(o.ch, wake, "observe "+o.name)
		if r.err != nil {
			seen = append(seen, errText(r.err))
			break
		}
		if r.v.Kv == nil {
			seen = append(seen, "no kv")
			continue
		}
		seen = append(seen, string(r.v.Kv.Value)+"@"+strings.TrimPrefix(lockKeys([]*mvccpb.KeyValue{r.v.Kv}, o.name, o.leases), o.name+"/"))
	}
	return strings.Join(seen, " ")
}

// silent says whether the stream sends nothing for quiet.
func (o *observer) silent() string {
	select {
	case r := <-o.ch:
		if r.err != nil {
			return "ended: " + errText(r.err)
		}
		return fmt.Sprintf("sent %q", r.v.Kv.Value)
	case <-time.After(quiet):
		return "nothing sent"
	}
}

func electionChecks(a, b, c *member) {
	// TestV3ElectionCampaign, with Leader, Proclaim and Resign around it.
	expect("leader of elect-a before any campaign", leader(b, "elect-a", nil, ""), `error code=Unknown message="election: no leader"`)
	leaseA, leaseB := grant(a, longTTL), grant(a, longTTL)
	c1, err := campaignNow(a, "elect-a", leaseA, "abc")
	expect("campaign elect-a with lease A", elected(a, c1, err, "elect-a", leaseA, "A"),
		`leader name "elect-a", key elect-a/<lease A hex>, lease = lease A true, rev = key create rev true, header rev = rev, key on the lease true, value "abc"`)
	expect("leader of elect-a", leader(b, "elect-a", c1.Leader, "A"),
		`key elect-a/<lease A hex>, value "abc", create rev = leader rev true, lease = leader lease true`)

	waiter := async(campaignOn(b, "elect-a", leaseB, "def", 20*time.Second))
	expect("campaign elect-a with lease B", waiting(waiter), "still waiting")
	wkv := present(c, keyOf("elect-a", leaseB))
	expect("waiter's key elect-a/<lease B hex>", fmt.Sprintf("exists %v, created after the leader's %v, value %q",
		wkv != nil, wkv != nil && wkv.CreateRevision > c1.Leader.Rev, valueOf(wkv)), `exists true, created after the leader's true, value "def"`)
	expect("leader of elect-a while B waits", leader(c, "elect-a", c1.Leader, "A"),
		`key elect-a/<lease A hex>, value "abc", create rev = leader rev true, lease = leader lease true`)

	expect("proclaim abc2 as A", proclaim(c, c1.Leader, "abc2"), "ok")
	expect("leader of elect-a", leader(a, "elect-a", c1.Leader, "A"),
		`key elect-a/<lease A hex>, value "abc2", create rev = leader rev true, lease = leader lease true`)
	expect("proclaim as A with rev+1", proclaim(a, with(c1.Leader, func(l *v3electionpb.LeaderKey) { l.Rev++ }), "bad"), `error code=Unknown message="election: not leader"`)
	expect("proclaim as A under another name", proclaim(a, with(c1.Leader, func(l *v3electionpb.LeaderKey) { l.Name = []byte("elsewhere") }), "abc3"), "ok")
	expect("proclaim without a leader", proclaim(a, nil, "bad"), `error code=Unknown message="\"leader\" field must be provided"`)
	expect("resign without a leader", resign(a, nil), `error code=Unknown message="\"leader\" field must be provided"`)
	expect("resign as A with rev+1", resign(b, with(c1.Leader, func(l *v3electionpb.LeaderKey) { l.Rev++ })), "ok")
	expect("leader of elect-a", leader(a, "elect-a", c1.Leader, "A"),
		`key elect-a/<lease A hex>, value "abc3", create rev = leader rev true, lease = leader lease true`)
	expect("campaign elect-a with lease B", waiting(waiter), "still waiting")

	expect("resign as A", resign(c, c1.Leader), "ok")
	r := await(waiter, wake, "campaign after resign")
	expect("campaign with lease B after A resigned", elected(b, r.v, r.err, "elect-a", leaseB, "B"),
		`leader name "elect-a", key elect-a/<lease B hex>, lease = lease B true, rev = key create rev true, header rev = rev, key on the lease true, value "def"`)
	c2 := r.v
	expect("B's header rev > A's header rev", fmt.Sprint(c2.Header.Revision > c1.Header.Revision), "true")
	expect("leader of elect-a", leader(c, "elect-a", c2.Leader, "B"),
		`key elect-a/<lease B hex>, value "def", create rev = leader rev true, lease = leader lease true`)
	expect("proclaim as A, resigned", proclaim(a, c1.Leader, "bad"), `error code=Unknown message="election: not leader"`)
	expect("resign as A again", resign(a, c1.Leader), "ok")
	expect("leader of elect-a", leader(a, "elect-a", c2.Leader, "B"),
		`key elect-a/<lease B hex>, value "def", create rev = leader rev true, lease = leader lease true`)
	expect("resign as B", resign(b, c2.Leader), "ok")
	expect("leader of elect-a after B resigned", leader(a, "elect-a", nil, ""), `error code=Unknown message="election: no leader"`)
	expect("keys under elect-a/", fmt.Sprint(len(under(c, "elect-a/"))), "0")

	// TestElectionSessionRecampaign: the same lease campaigns again at once
	// and its value replaces the first.
	leaseR := grant(a, longTTL)
	cr, err := campaignNow(a, "elect-r", leaseR, "abc")
	expect("campaign elect-r with lease R", elected(a, cr, err, "elect-r", leaseR, "R"),
		`leader name "elect-r", key elect-r/<lease R hex>, lease = lease R true, rev = key create rev true, header rev = rev, key on the lease true, value "abc"`)
	cr2, err := campaignNow(b, "elect-r", leaseR, "def")
	if err != nil {
		expect("campaign elect-r with lease R again", errText(err), "ok")
	}
	expect("campaign elect-r with lease R again", fmt.Sprintf("same key %v, same rev %v",
		string(cr2.Leader.Key) == string(cr.Leader.Key), cr2.Leader.Rev == cr.Leader.Rev), "same key true, same rev true")
	expect("leader of elect-r", leader(c, "elect-r", cr.Leader, "R"),
		`key elect-r/<lease R hex>, value "def", create rev = leader rev true, lease = leader lease true`)
	expect("resign as R", resign(c, cr2.Leader), "ok")

	// Leases that do not exist, and lease 0.
	_, err = campaignNow(a, "elect-x", unknownLease, "x")
	expect("campaign with a lease never granted", errText(err), `error code=Unknown message="etcdserver: requested lease not found"`)
	revoked := grant(a, longTTL)
	revoke(a, revoked)
	_, err = campaignNow(b, "elect-x", revoked, "x")
	expect("campaign with a revoked lease", errText(err), `error code=Unknown message="etcdserver: requested lease not found"`)
	expect("keys under elect-x/", fmt.Sprint(len(under(c, "elect-x/"))), "0")
	cz, err := campaignNow(a, "elect-zero", 0, "z")
	if err != nil {
		expect("campaign with lease 0", errText(err), "ok")
	}
	expect("campaign with lease 0", fmt.Sprintf("%s, granted TTL %d",
		elected(a, cz, err, "elect-zero", cz.Leader.Lease, "new"), grantedTTL(a, cz.Leader.Lease)),
		`leader name "elect-zero", key elect-zero/<lease new hex>, lease = lease new true, rev = key create rev true, header rev = rev, key on the lease true, value "z", granted TTL 60`)
	expect("resign with lease 0's key", resign(b, cz.Leader), "ok")
	revoke(a, cz.Leader.Lease)

	// TestElectionOnPrefixOfExistingKey: elect-pfxa is not in elect-pfx.
	cx, cancel := call()
	_, err = a.cli.Put(cx, "elect-pfxa", "value")
	cancel()
	must(err, "put elect-pfxa")
	leaseP := grant(a, longTTL)
	cp, err := campaignNow(b, "elect-pfx", leaseP, "p")
	expect("campaign elect-pfx beside key elect-pfxa", elected(b, cp, err, "elect-pfx", leaseP, "P"),
		`leader name "elect-pfx", key elect-pfx/<lease P hex>, lease = lease P true, rev = key create rev true, header rev = rev, key on the lease true, value "p"`)
	expect("resign as P", resign(b, cp.Leader), "ok")

	// A leader whose lease expires hands over; its lease then cannot campaign.
	leaseE, leaseF := grant(a, shortTTL), grant(a, longTTL)
	ce, err := campaignNow(a, "elect-b", leaseE, "short")
	expect("campaign elect-b with short lease E", elected(a, ce, err, "elect-b", leaseE, "E"),
		`leader name "elect-b", key elect-b/<lease E hex>, lease = lease E true, rev = key create rev true, header rev = rev, key on the lease true, value "short"`)
	waiter = async(campaignOn(b, "elect-b", leaseF, "next", expiry+wake))
	expect("campaign elect-b with lease F", waiting(waiter), "still waiting")
	r = await(waiter, expiry, "campaign after expiry")
	expect("campaign with lease F once lease E expired", elected(b, r.v, r.err, "elect-b", leaseF, "F"),
		`leader name "elect-b", key elect-b/<lease F hex>, lease = lease F true, rev = key create rev true, header rev = rev, key on the lease true, value "next"`)
	cf := r.v
	expect("leader of elect-b", leader(c, "elect-b", cf.Leader, "F"),
		`key elect-b/<lease F hex>, value "next", create rev = leader rev true, lease = leader lease true`)
	expect("E's key", settle(c, string(ce.Leader.Key), false, 0), "absent")
	_, err = campaignNow(c, "elect-b", leaseE, "again")
	expect("campaign with expired lease E", errText(err), `error code=Unknown message="etcdserver: requested lease not found"`)
	expect("proclaim as E, expired", proclaim(c, ce.Leader, "bad"), `error code=Unknown message="election: not leader"`)
	expect("resign as F", resign(a, cf.Leader), "ok")

	// A campaign that gives up (its deadline passes) takes its key away.
	leaseJ, leaseK := grant(a, longTTL), grant(a, longTTL)
	cj, err := campaignNow(a, "elect-c", leaseJ, "j")
	expect("campaign elect-c with lease J", elected(a, cj, err, "elect-c", leaseJ, "J"),
		`leader name "elect-c", key elect-c/<lease J hex>, lease = lease J true, rev = key create rev true, header rev = rev, key on the lease true, value "j"`)
	rk := await(async(campaignOn(b, "elect-c", leaseK, "k", 500*time.Millisecond)), wake, "campaign with a deadline")
	expect("campaign elect-c with lease K, deadline 500ms", errText(rk.err), `error code=DeadlineExceeded message="context deadline exceeded"`)
	expect("K's key after the deadline", settle(a, keyOf("elect-c", leaseK), false, wake), "absent")
	expect("leader of elect-c", leader(c, "elect-c", cj.Leader, "J"),
		`key elect-c/<lease J hex>, value "j", create rev = leader rev true, lease = leader lease true`)
	expect("resign as J", resign(a, cj.Leader), "ok")

	// Proclaim and Resign check only that the key has the given create
	// revision, so a waiter's own key works with both; a waiter whose key
	// is gone still wins when those before it go.
	leaseW1, leaseW2 := grant(a, longTTL), grant(a, longTTL)
	w1, err := campaignNow(a, "elect-w", leaseW1, "w1")
	expect("campaign elect-w with lease W1", elected(a, w1, err, "elect-w", leaseW1, "W1"),
		`leader name "elect-w", key elect-w/<lease W1 hex>, lease = lease W1 true, rev = key create rev true, header rev = rev, key on the lease true, value "w1"`)
	waiter = async(campaignOn(b, "elect-w", leaseW2, "w2", 20*time.Second))
	expect("campaign elect-w with lease W2", waiting(waiter), "still waiting")
	w2kv := present(c, keyOf("elect-w", leaseW2))
	if w2kv == nil {
		fail("W2's key missing")
	}
	w2 := &v3electionpb.LeaderKey{Name: []byte("elect-w"), Key: w2kv.Key, Rev: w2kv.CreateRevision, Lease: leaseW2}
	expect("proclaim as waiter W2", proclaim(c, w2, "w2-early"), "ok")
	expect("W2's key value", valueOf(get(a, string(w2kv.Key))), "w2-early")
	expect("leader of elect-w", leader(a, "elect-w", w1.Leader, "W1"),
		`key elect-w/<lease W1 hex>, value "w1", create rev = leader rev true, lease = leader lease true`)
	expect("resign as waiter W2", resign(c, w2), "ok")
	expect("W2's key after it", settle(a, string(w2kv.Key), false, 0), "absent")
	expect("campaign elect-w with lease W2", waiting(waiter), "still waiting")
	expect("resign as W1", resign(a, w1.Leader), "ok")
	r = await(waiter, wake, "campaign after resign")
	expect("campaign with lease W2 after W1 resigned", elected(b, r.v, r.err, "elect-w", leaseW2, "W2"), `leader name "elect-w", key elect-w/<lease W2 hex>, lease = lease W2 true, header rev = rev, key missing`)
	expect("leader of elect-w", leader(a, "elect-w", nil, ""), `error code=Unknown message="election: no leader"`)

	// TestV3ElectionObserve: every proclamation, in order, across a change
	// of leader.
	leaseO1, leaseO2, leaseO3 := grant(a, longTTL), grant(a, longTTL), grant(a, longTTL)
	leases := map[string]int64{"O1": leaseO1, "O2": leaseO2, "O3": leaseO3}
	obs := observe(c, "elect-obs", leases)
	expect("observe elect-obs with no leader", obs.silent(), "nothing sent")
	o1, err := campaignNow(a, "elect-obs", leaseO1, "0")
	expect("campaign elect-obs with lease O1", elected(a, o1, err, "elect-obs", leaseO1, "O1"),
		`leader name "elect-obs", key elect-obs/<lease O1 hex>, lease = lease O1 true, rev = key create rev true, header rev = rev, key on the lease true, value "0"`)
	expect("observed", obs.next(1), "0@<lease O1 hex>")
	for i := 1; i <= 4; i++ {
		expect(fmt.Sprintf("proclaim %d as O1", i), proclaim(a, o1.Leader, fmt.Sprint(i)), "ok")
	}
	expect("observed", obs.next(4), "1@<lease O1 hex> 2@<lease O1 hex> 3@<lease O1 hex> 4@<lease O1 hex>")
	waiter = async(campaignOn(b, "elect-obs", leaseO2, "5", 20*time.Second))
	expect("campaign elect-obs with lease O2", waiting(waiter), "still waiting")
	expect("O2's key", settle(a, keyOf("elect-obs", leaseO2), true, wake), "present")
	expect("observed while O2 waits", obs.silent(), "nothing sent")
	expect("resign as O1", resign(a, o1.Leader), "ok")
	r = await(waiter, wake, "campaign after resign")
	expect("campaign with lease O2 after O1 resigned", elected(b, r.v, r.err, "elect-obs", leaseO2, "O2"),
		`leader name "elect-obs", key elect-obs/<lease O2 hex>, lease = lease O2 true, rev = key create rev true, header rev = rev, key on the lease true, value "5"`)
	o2 := r.v
	expect("observed", obs.next(1), "5@<lease O2 hex>")
	for i := 6; i <= 9; i++ {
		expect(fmt.Sprintf("proclaim %d as O2", i), proclaim(b, o2.Leader, fmt.Sprint(i)), "ok")
	}
	expect("observed", obs.next(4), "6@<lease O2 hex> 7@<lease O2 hex> 8@<lease O2 hex> 9@<lease O2 hex>")
	expect("proclaim 9 again as O2", proclaim(b, o2.Leader, "9"), "ok")
	expect("observed", obs.next(1), "9@<lease O2 hex>")

	// A new observer hears the current leader first.
	obs2 := observe(a, "elect-obs", leases)
	expect("second observer's first message", obs2.next(1), "9@<lease O2 hex>")
	expect("second observer then", obs2.silent(), "nothing sent")
	obs2.cancel()
	expect("second observer after cancelling", obs2.next(1), `error code=Canceled message="context canceled"`)

	expect("resign as O2", resign(b, o2.Leader), "ok")
	expect("observed with no leader", obs.silent(), "nothing sent")
	expect("leader of elect-obs", leader(a, "elect-obs", nil, ""), `error code=Unknown message="election: no leader"`)
	o3, err := campaignNow(c, "elect-obs", leaseO3, "10")
	expect("campaign elect-obs with lease O3", elected(c, o3, err, "elect-obs", leaseO3, "O3"),
		`leader name "elect-obs", key elect-obs/<lease O3 hex>, lease = lease O3 true, rev = key create rev true, header rev = rev, key on the lease true, value "10"`)
	expect("observed", obs.next(1), "10@<lease O3 hex>")
	expect("revoke O3", func() string { revoke(b, leaseO3); return "ok" }(), "ok")
	expect("observed after revoking O3", obs.silent(), "nothing sent")
	expect("leader of elect-obs", leader(a, "elect-obs", nil, ""), `error code=Unknown message="election: no leader"`)
	obs.cancel()
	expect("observer after cancelling", obs.next(1), `error code=Canceled message="context canceled"`)

	for _, lease := range []int64{leaseA, leaseB, leaseR, leaseP, leaseF, leaseJ, leaseK, leaseW1, leaseW2, leaseO1, leaseO2} {
		revoke(a, lease)
	}
}

// relation is how x compares with y: "<", "=" or ">".
func relation(x, y int64) string {
	switch {
	case x < y:
		return "<"
	case x > y:
		return ">"
	}
	return "="
}

// present polls until key exists and returns its kv, or nil after wake.
func present(m *member, key string) *mvccpb.KeyValue {
	settle(m, key, true, wake)
	return get(m, key)
}

func valueOf(kv *mvccpb.KeyValue) string {
	if kv == nil {
		return ""
	}
	return string(kv.Value)
}
