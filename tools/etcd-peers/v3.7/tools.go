//go:build tools

// Package etcdpeers37 pins etcd 3.7.3's server, the newest etcd, which the
// benchmarks compare against. build.sh builds it from this module.
package etcdpeers37

import _ "go.etcd.io/etcd/server/v3"
