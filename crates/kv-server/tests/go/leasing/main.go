// Command leasing drives etcd's leasing KV (go.etcd.io/etcd/client/v3/leasing)
// through one endpoint with two leasing clients, and prints one line per
// step: what the step saw. Every step also checks what it saw, and the
// command exits with status 1 at the first surprise.
//
// The leasing KV wraps every write in a txn guarded by its leasing keys,
// so a user's txn becomes a txn nested in the leasing txn, and a user's
// nested txn a third level; putting one key in both branches there is the
// shape a store must accept as etcd does.
//
// Usage: leasing -endpoint 127.0.0.1:2379
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/leasing"
)

// Bounds the whole run; a member on loopback answers in milliseconds.
const runTimeout = 60 * time.Second

var ctx context.Context

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "leasing: "+format+"\n", args...)
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

// values is what a get saw: key=value pairs in key order, or "none".
func values(resp *clientv3.GetResponse, err error) string {
	if err != nil {
		return "error " + err.Error()
	}
	if len(resp.Kvs) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		parts = append(parts, string(kv.Key)+"="+string(kv.Value))
	}
	return strings.Join(parts, ",")
}

func committed(resp *clientv3.TxnResponse, err error) string {
	if err != nil {
		return "error " + err.Error()
	}
	return fmt.Sprintf("succeeded=%v", resp.Succeeded)
}

func connect(endpoint string) *clientv3.Client {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second})
	must(err, "connect")
	return cli
}

func main() {
	endpoint := flag.String("endpoint", "127.0.0.1:2379", "the member to use")
	flag.Parse()
	var cancel context.CancelFunc
	ctx, cancel = context.WithTimeout(context.Background(), runTimeout)
	defer cancel()

	cli1, cli2 := connect(*endpoint), connect(*endpoint)
	defer cli1.Close()
	defer cli2.Close()
	lkv1, close1, err := leasing.NewKV(cli1, "leasing/")
	must(err, "leasing KV 1")
	defer close1()
	lkv2, close2, err := leasing.NewKV(cli2, "leasing/")
	must(err, "leasing KV 2")
	defer close2()
	plain := cli1.KV

	_, err = lkv1.Put(ctx, "k", "1")
	must(err, "put k=1")
	expect("get through client 1", values(lkv1.Get(ctx, "k")), "k=1")
	expect("its leasing key exists", fmt.Sprint(count(plain, "leasing/k")), "1")
	expect("get again, from client 1's cache", values(lkv1.Get(ctx, "k")), "k=1")

	_, err = lkv2.Put(ctx, "k", "2")
	must(err, "put k=2 through client 2")
	expect("client 1 sees client 2's put", values(lkv1.Get(ctx, "k")), "k=2")

	// Two levels: the leasing txn around a user txn putting k in both branches.
	expect("txn putting k in both branches",
		committed(lkv1.Txn(ctx).
			If(clientv3.Compare(clientv3.Value("k"), "=", "2")).
			Then(clientv3.OpPut("k", "then")).
			Else(clientv3.OpPut("k", "else")).
			Commit()),
		"succeeded=true")
	expect("after it", values(lkv1.Get(ctx, "k")), "k=then")

	// Three levels: the user's txn holds a txn putting k in both branches.
	expect("txn holding a txn that puts k in both branches",
		committed(lkv1.Txn(ctx).
			If(clientv3.Compare(clientv3.Version("k"), ">", 0)).
			Then(clientv3.OpTxn(nil,
				[]clientv3.Op{clientv3.OpPut("k", "deep-then")},
				[]clientv3.Op{clientv3.OpPut("k", "deep-else")})).
			Commit()),
		"succeeded=true")
	expect("after it", values(lkv1.Get(ctx, "k")), "k=deep-then")

	// The same shape through the other client, taking the failure branches.
	expect("txn taking the failure branches",
		committed(lkv2.Txn(ctx).
			If(clientv3.Compare(clientv3.Value("k"), "=", "nope")).
			Then(clientv3.OpPut("k", "unreached")).
			Else(clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.Value("k"), "=", "nope")},
				[]clientv3.Op{clientv3.OpPut("k", "else-then")},
				[]clientv3.Op{clientv3.OpPut("k", "else-else")})).
			Commit()),
		"succeeded=false")
	expect("client 1 sees it", values(lkv1.Get(ctx, "k")), "k=else-else")

	_, err = lkv1.Delete(ctx, "k")
	must(err, "delete k")
	expect("deleted, through client 2", values(lkv2.Get(ctx, "k")), "none")
	expect("deleted, without leasing", values(plain.Get(ctx, "k")), "none")

	for _, key := range []string{"p/1", "p/2"} {
		_, err = lkv1.Put(ctx, key, "v")
		must(err, "put "+key)
		expect("get "+key+" through client 1", values(lkv1.Get(ctx, key)), key+"=v")
	}
	expect("prefix get through client 2", values(lkv2.Get(ctx, "p/", clientv3.WithPrefix())), "p/1=v,p/2=v")
	resp, err := lkv2.Delete(ctx, "p/", clientv3.WithPrefix())
	must(err, "prefix delete")
	expect("prefix delete through client 2", fmt.Sprint(resp.Deleted), "2")
	expect("client 1 sees p/1 gone", values(lkv1.Get(ctx, "p/1")), "none")
	expect("every user key, without leasing", values(plain.Get(ctx, "p", clientv3.WithFromKey())), "none")
}

func count(kv clientv3.KV, key string) int64 {
	resp, err := kv.Get(ctx, key, clientv3.WithCountOnly())
	must(err, "count "+key)
	return resp.Count
}
