#!/usr/bin/env python3
"""Drive OpenStack's etcd3gw client through the gRPC-JSON gateway.

    etcd3gw_flows.py --endpoint 127.0.0.1:P [--prefix /pyflows-gw/] [--verbose]

etcd3gw (2.7.0, used by OpenStack's tooz, Neutron, Cinder, ...) speaks only
the gateway: a requests.Session POSTing JSON to /v3/kv/*, /v3/lease/*,
/v3/kv/lease/* (the older aliases of revoke and timetolive),
/v3/maintenance/status, /v3/cluster/member/list, GET /version to pick the
API prefix, and a streamed POST /v3/watch per watcher. This program walks its
public API: put/get/delete, prefixes, create/replace (its compare-and-set
transactions), raw transactions, leases (grant, keys, ttl, refresh, revoke,
expiry), its Lock, and watches of a key and of a prefix, with prev_kv,
filters and start_revision, and watch_once / watch_prefix_once.

Standard output is the transcript: one numbered line per step with only
outcomes two correct servers must agree on (values, booleans, event types and
key versions), never revisions, lease ids, cluster ids or timings. An outcome
etcd's semantics rule out stops the run with "FAIL: ..." on standard error and
exit status 1. A watchdog ends the run (exit 3) after --deadline seconds,
since etcd3gw's watch POST and its event iterator have no timeout of their
own. All keys live under --prefix (and the lock keys under /locks/ with the
same stem); the prefix is cleared first and last. Run it alone against a
cluster: watch_prefix_once (see below) watches a much wider range than asked.
"""

import argparse
import json
import logging
import os
import sys
import threading
import time

LOG = logging.getLogger('etcd3gw_flows')


class FlowError(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise FlowError(msg)


def fmt(v):
    if isinstance(v, bytes):
        v = v.decode('utf-8', errors='backslashreplace')
    if isinstance(v, str):
        return v if v and ' ' not in v and '"' not in v else json.dumps(v)
    if isinstance(v, (dict, list, tuple)):
        return json.dumps(v, sort_keys=True, separators=(',', ':'), default=_jsonable)
    return str(v)


def _jsonable(v):
    if isinstance(v, bytes):
        return v.decode('utf-8', errors='backslashreplace')
    raise TypeError(repr(v))


class Transcript:
    def __init__(self):
        self.n = 0

    def step(self, name, **fields):
        self.n += 1
        parts = ['%02d %s' % (self.n, name)] + ['%s=%s' % (k, fmt(v)) for k, v in fields.items()]
        print(' '.join(parts), flush=True)


def s(b):
    """bytes from etcd3gw -> str for the transcript and comparisons."""
    return b.decode('utf-8') if isinstance(b, (bytes, bytearray)) else b


def ev(e, strip=''):
    """An etcd3gw watch event (etcd's JSON with key and value already
    base64-decoded by etcd3gw) reduced to what must match: the type (etcd
    leaves "type" out for PUT, the proto default), the key, the value and the
    key's version. prev_kv is left base64-encoded by etcd3gw; decode it here."""
    import base64
    kv = e['kv']
    out = [e.get('type', 'PUT'), s(kv['key'])[len(strip):], s(kv.get('value', b'')), int(kv.get('version', 0))]
    if 'prev_kv' in e:
        out.append('prev=' + base64.b64decode(e['prev_kv'].get('value', '')).decode())
    return out


def collect(watch_pair, n, timeout=8.0, linger=0.3):
    """Read events from an etcd3gw (iterator, cancel) pair until n arrived, but
    never longer than timeout: etcd3gw's iterator blocks on a queue with no
    timeout, so it runs in a thread and cancel() (which also pushes the
    sentinel that ends the iterator) is always called. linger waits a little
    past the n-th event so an unexpected extra event is caught too."""
    it, cancel = watch_pair
    got = []
    done = threading.Event()

    def reader():
        try:
            for e in it:
                got.append(e)
        finally:
            done.set()
    th = threading.Thread(target=reader, daemon=True)
    th.start()
    deadline = time.time() + timeout
    while len(got) < n and time.time() < deadline:
        time.sleep(0.02)
    time.sleep(linger)
    cancel()
    done.wait(2)
    return list(got)


class Repeater:
    """Puts the same key/value every interval until stopped (bounded), so a
    watch_once started at an unknown moment still sees a PUT of that value."""

    def __init__(self, client, key, value, interval=0.25, limit=8.0):
        self.stop_evt = threading.Event()

        def loop():
            end = time.time() + limit
            while not self.stop_evt.is_set() and time.time() < end:
                try:
                    client.put(key, value)
                except Exception as e:  # the main thread reports the outcome
                    LOG.warning('repeater put failed: %r', e)
                self.stop_evt.wait(interval)
        self.th = threading.Thread(target=loop, daemon=True)
        self.th.start()

    def stop(self):
        self.stop_evt.set()
        self.th.join(3)


def error_of(exc):
    """etcd3gw raises Etcd3Exception(resp.text, resp.reason) on a non-200
    answer; the gateway's error body is {"error","code","message"}."""
    try:
        body = json.loads(exc.detail_text)
        return {'class': type(exc).__name__, 'code': body.get('code'), 'message': body.get('message')}
    except Exception:
        return {'class': type(exc).__name__, 'detail': str(exc.detail_text)[:200]}


def run(args, t):
    import etcd3gw
    from etcd3gw import exceptions as gwexc

    host, port = args.endpoint.rsplit(':', 1)
    P = args.prefix
    check(P.startswith('/') and P.endswith('/'), '--prefix must start and end with /')
    lock_stem = P.strip('/') + '-lock'
    # timeout applies to every unary call; the watch POST has none (etcd3gw
    # does not pass one), the watchdog covers it.
    client = etcd3gw.client(host=host, port=int(port), timeout=10)

    def cleanup():
        client.delete_prefix(P)
        client.delete_prefix('/locks/' + lock_stem)

    # --- discovery, status, members ------------------------------------------
    check(client.api_path == '/v3/', 'api_path %r' % client.api_path)
    cleanup()
    t.step('connect', api_path=client.api_path)

    st = client.status()
    check(st.get('version') and st.get('leader') and st.get('header'), 'status %r' % st)
    t.step('status', has_version=True, has_leader=True, has_header=True)

    # The count is printed, not asserted: it must match between the two
    # clusters compared, whatever size the test gives them.
    members = client.members()
    check(len(members) >= 1 and all(m.get('clientURLs') and m.get('name') for m in members),
          'members %r' % members)
    t.step('members', count=len(members), each_has_name_and_clientURLs=True)

    # --- put / get / delete -----------------------------------------------------
    k = P + 'k1'
    r = client.put(k, 'v1')
    got = client.get(k)
    miss = client.get(P + 'missing')
    check(r is True and got == [b'v1'] and miss == [], 'put/get %r %r %r' % (r, got, miss))
    t.step('put_get', put=r, value=got[0], missing=miss)

    client.put(k, 'v2')
    (val, meta), = client.get(k, metadata=True)
    check(val == b'v2' and meta['version'] == '2' and s(meta['key']) == k
          and int(meta['mod_revision']) > int(meta['create_revision']), 'overwrite %r %r' % (val, meta))
    t.step('overwrite', value=val, version=int(meta['version']), key=s(meta['key']), mod_after_create=True)

    # etcd omits "deleted" when it is 0; etcd3gw turns its presence into the
    # boolean, so a second delete is False.
    d1, d2 = client.delete(k), client.delete(k)
    check(d1 is True and d2 is False and client.get(k) == [], 'delete %r %r' % (d1, d2))
    t.step('delete', first=d1, second=d2, after=client.get(k))

    # Empty value: etcd leaves "value" out of the kv, etcd3gw reads it as b''.
    client.put(P + 'empty', '')
    (val, meta), = client.get(P + 'empty', metadata=True)
    check(val == b'' and 'value' not in meta, 'empty value %r %r' % (val, meta))
    t.step('empty_value', value=val)

    # --- ranges and prefixes ------------------------------------------------------
    D = P + 'dir/'
    # Values chosen so that key order, value order and reverse order differ.
    for name, value in (('a', 'v-2'), ('b', 'v-3'), ('c', 'v-1')):
        client.put(D + name, value)
    client.put(P + 'dir0', 'outside')   # just past the prefix's range end
    client.put(P + 'dir', 'outside')    # just before it
    keys = lambda items: [s(m['key'])[len(D):] for _, m in items]
    asc = client.get_prefix(D)
    desc = client.get_prefix(D, sort_order='descend', sort_target='key')
    byval = client.get_prefix(D, sort_order='ascend', sort_target='value')
    check(keys(asc) == ['a', 'b', 'c'] and [v for v, _ in asc] == [b'v-2', b'v-3', b'v-1'],
          'get_prefix %r' % asc)
    check(keys(desc) == ['c', 'b', 'a'] and keys(byval) == ['c', 'a', 'b'], 'sorted %r %r' % (desc, byval))
    t.step('get_prefix', keys=keys(asc), values=[v for v, _ in asc], descend=keys(desc), by_value=keys(byval))

    from etcd3gw.utils import _increment_last_byte
    end = _increment_last_byte(D)
    lim = client.get(D, metadata=True, range_end=end, limit=2)
    konly = client.get(D, metadata=True, range_end=end, keys_only=True)
    conly = client.get(D, range_end=end, count_only=True)
    ser = client.get(D + 'b', serializable=True)
    check(keys(lim) == ['a', 'b'] and [v for v, _ in konly] == [b'', b'', b''] and conly == [] and ser == [b'v-3'],
          'range options %r %r %r %r' % (lim, konly, conly, ser))
    t.step('range_options', limit2=keys(lim), keys_only_values=[v for v, _ in konly], count_only_kvs=conly,
           serializable=ser)

    everything = client.get_all()
    mine = sorted(s(m['key'])[len(P):] for _, m in everything if s(m['key']).startswith(P))
    check(mine == ['dir', 'dir/a', 'dir/b', 'dir/c', 'dir0', 'empty'], 'get_all %r' % mine)
    t.step('get_all', under_prefix=mine)

    dp1 = client.delete_prefix(D)
    dp2 = client.delete_prefix(D)
    left = sorted(s(m['key'])[len(P):] for _, m in client.get_prefix(P))
    check(dp1 is True and dp2 is False and client.get_prefix(D) == [] and left == ['dir', 'dir0', 'empty'],
          'delete_prefix %r %r %r' % (dp1, dp2, left))
    t.step('delete_prefix', first=dp1, second=dp2, left=left)

    # --- create / replace: etcd3gw's compare-and-set transactions --------------
    ck = P + 'cas'
    c1, c2 = client.create(ck, 'c1'), client.create(ck, 'c2')
    after_create = client.get(ck)
    r1, r2 = client.replace(ck, 'c1', 'c3'), client.replace(ck, 'c1', 'c4')
    after_replace = client.get(ck)
    check(c1 is True and c2 is False and after_create == [b'c1'] and r1 is True and r2 is False
          and after_replace == [b'c3'], 'create/replace %r %r %r %r' % (c1, c2, r1, r2))
    t.step('create_replace', create=c1, create_again=c2, value=after_create[0], replace=r1, replace_stale=r2,
           final=after_replace[0])

    # A lease on create: the key goes when the lease is revoked.
    lease = client.lease(ttl=30)
    c3 = client.create(P + 'cas-leased', 'x', lease=lease)
    lk = lease.keys()
    lease.revoke()
    gone = client.get(P + 'cas-leased')
    check(c3 is True and lk == [(P + 'cas-leased').encode()] and gone == [], 'create with lease %r %r %r' % (c3, lk, gone))
    t.step('create_with_lease', create=c3, lease_keys=[s(x) for x in lk], after_revoke=gone)

    # --- a raw transaction, the way etcd3gw users (tooz) build them ----------
    from etcd3gw.utils import _encode
    tk = P + 'txn'
    client.put(tk, 't1')
    txn = {
        'compare': [{'key': _encode(tk), 'result': 'EQUAL', 'target': 'VERSION', 'version': 1},
                    {'key': _encode(tk), 'result': 'NOT_EQUAL', 'target': 'VALUE', 'value': _encode('zzz')}],
        'success': [{'request_put': {'key': _encode(tk), 'value': _encode('t2'), 'prev_kv': True}},
                    {'request_range': {'key': _encode(tk)}}],
        'failure': [{'request_range': {'key': _encode(tk)}}],
    }
    res1 = client.transaction(txn)
    res2 = client.transaction(txn)   # version is 2 now: the failure branch runs

    def kinds(res):
        out = []
        for r in res.get('responses', []):
            (kind, body), = r.items()
            if kind == 'response_range':
                out.append([kind] + [s(_decode(kv.get('value', ''))) for kv in body.get('kvs', [])])
            elif kind == 'response_put':
                out.append([kind, 'prev=' + s(_decode(body.get('prev_kv', {}).get('value', '')))])
            else:
                out.append([kind])
        return out
    from etcd3gw.utils import _decode
    k1, k2 = kinds(res1), kinds(res2)
    check(res1.get('succeeded') is True and 'succeeded' not in res2
          and k1 == [['response_put', 'prev=t1'], ['response_range', 't2']] and k2 == [['response_range', 't2']],
          'txn %r %r' % (res1, res2))
    t.step('transaction', first_succeeded=True, first=k1, second_succeeded_field_absent=True, second=k2)

    # --- leases ------------------------------------------------------------------
    lease = client.lease(ttl=30)
    check(lease.id > 0, 'lease id %r' % lease.id)
    client.put(P + 'l1', 'x', lease=lease)
    client.put(P + 'l2', 'y', lease=lease)
    ttl = lease.ttl()
    keys_l = sorted(s(x)[len(P):] for x in lease.keys())
    ref = lease.refresh()
    check(25 <= ttl <= 30 and keys_l == ['l1', 'l2'] and ref == 30, 'lease %r %r %r' % (ttl, keys_l, ref))
    t.step('lease', ttl_between_25_and_30=True, keys=keys_l, refresh_ttl=ref)

    rv = lease.revoke()
    after = [client.get(P + 'l1'), client.get(P + 'l2')]
    ttl2, keys2, ref2 = lease.ttl(), lease.keys(), lease.refresh()
    check(rv is True and after == [[], []] and ttl2 == -1 and keys2 == [] and ref2 == -1,
          'revoke %r %r %r %r %r' % (rv, after, ttl2, keys2, ref2))
    t.step('lease_revoke', revoke=rv, keys_after=after, ttl=ttl2, keys=keys2, refresh=ref2)

    try:
        lease.revoke()
        err = None
    except gwexc.Etcd3Exception as e:
        err = error_of(e)
    check(err == {'class': 'Etcd3Exception', 'code': 5, 'message': 'etcdserver: requested lease not found'},
          'revoke again %r' % err)
    t.step('lease_revoke_again', error=err)

    # A lease left to expire: its key goes, and a watch on it sees the DELETE.
    short = client.lease(ttl=3)
    ek = P + 'expiring'
    client.put(ek, 'soon', lease=short)
    t0 = time.time()
    events = collect(client.watch(ek), 1, timeout=15, linger=0)
    waited = time.time() - t0
    got = [ev(e, P) for e in events]
    check(got == [['DELETE', 'expiring', '', 0]] and client.get(ek) == [] and short.ttl() == -1,
          'expiry %r' % got)
    check(waited >= 1.5, 'lease with TTL 3 expired after only %.1f s' % waited)
    t.step('lease_expiry', events=got, after=client.get(ek), ttl=short.ttl())

    # --- Lock ---------------------------------------------------------------------
    name = lock_stem
    l1 = client.lock(name, ttl=30)
    l2 = client.lock(name, ttl=30)
    a1 = l1.acquire()
    # etcd3gw's acquire does not wait: a held lock makes it return False.
    a2 = l2.acquire()
    held = [l1.is_acquired(), l2.is_acquired()]
    ref = l1.refresh()
    rel1, rel2 = l1.release(), l1.release()
    a3 = l2.acquire()
    held2 = [l1.is_acquired(), l2.is_acquired()]
    check(a1 is True and a2 is False and held == [True, False] and ref == 30 and rel1 is True and rel2 is False
          and a3 is True and held2 == [False, True], 'lock %r' % [a1, a2, held, ref, rel1, rel2, a3, held2])
    t.step('lock', acquire=a1, second_acquire=a2, held=held, refresh=ref, release=rel1, release_again=rel2,
           second_acquire_after_release=a3, held_after=held2)
    l2.release()
    with client.lock(name + '-ctx', ttl=30) as l3:
        inside = l3.is_acquired()
    outside = l3.is_acquired()
    check(inside is True and outside is False, 'lock ctx %r %r' % (inside, outside))
    t.step('lock_context_manager', inside=inside, after=outside)
    for lk_ in (l1, l2, l3):
        if lk_.lease is not None:
            try:
                lk_.lease.revoke()
            except gwexc.Etcd3Exception:
                pass

    # --- watches --------------------------------------------------------------------
    wk = P + 'w'
    # etcd3gw's watch() returns once the response headers arrive. etcd sends
    # the headers together with the first message ("created": true), so the
    # watch is registered by then and the writes below cannot be missed. No
    # sleep is added on purpose: a server that answered before registering
    # the watch would lose these events, as it would for etcd3gw's users.
    pair = client.watch(wk)
    client.put(wk, 'a1')
    client.put(wk, 'a2')
    client.delete(wk)
    got = [ev(e, P) for e in collect(pair, 3)]
    check(got == [['PUT', 'w', 'a1', 1], ['PUT', 'w', 'a2', 2], ['DELETE', 'w', '', 0]], 'watch %r' % got)
    t.step('watch_key', events=got)

    WP = P + 'wp/'
    pair = client.watch_prefix(WP)
    client.put(WP + 'a', '1')
    client.put(P + 'wq', 'outside')   # not under the prefix: no event
    client.put(WP + 'b', '2')
    client.delete(WP + 'a')
    client.delete_prefix(WP)          # deletes b
    got = [ev(e, P) for e in collect(pair, 4)]
    check(got == [['PUT', 'wp/a', '1', 1], ['PUT', 'wp/b', '2', 1], ['DELETE', 'wp/a', '', 0],
                  ['DELETE', 'wp/b', '', 0]], 'watch_prefix %r' % got)
    t.step('watch_prefix', events=got)

    # Filters and prev_kv: one watcher drops PUTs, one drops DELETEs; both
    # ask for the previous value.
    fk = P + 'f'
    no_put = client.watch(fk, filters=['NOPUT'], prev_kv=True)
    no_del = client.watch(fk, filters=['NODELETE'], prev_kv=True)
    client.put(fk, 'f1')
    client.put(fk, 'f2')
    client.delete(fk)
    g1 = [ev(e, P) for e in collect(no_put, 1)]
    g2 = [ev(e, P) for e in collect(no_del, 2)]
    check(g1 == [['DELETE', 'f', '', 0, 'prev=f2']] and g2 == [['PUT', 'f', 'f1', 1], ['PUT', 'f', 'f2', 2, 'prev=f1']],
          'filters %r %r' % (g1, g2))
    t.step('watch_filters_prev_kv', noput=g1, nodelete=g2)

    # History: the writes happen first, the watch starts at the first one's
    # revision and gets them replayed.
    hk = P + 'h'
    client.put(hk, 'h1')
    (_, meta), = client.get(hk, metadata=True)
    client.put(hk, 'h2')
    client.delete(hk)
    got = [ev(e, P) for e in collect(client.watch(hk, start_revision=int(meta['mod_revision'])), 3)]
    check(got == [['PUT', 'h', 'h1', 1], ['PUT', 'h', 'h2', 2], ['DELETE', 'h', '', 0]], 'history %r' % got)
    # The same history through a range at that revision (etcd3gw passes the
    # revision as a JSON number).
    old = client.get(hk, revision=int(meta['mod_revision']))
    check(old == [b'h1'] and client.get(hk) == [], 'get at revision %r' % old)
    t.step('watch_start_revision', events=got, get_at_revision=old)

    # watch_once: the first event, or WatchTimedOut.
    try:
        client.watch_once(P + 'idle', timeout=1)
        timed_out = False
    except gwexc.WatchTimedOut:
        timed_out = True
    check(timed_out, 'watch_once on an idle key returned an event')
    rep = Repeater(client, P + 'once', 'o1')
    try:
        e = client.watch_once(P + 'once', timeout=5)
    finally:
        rep.stop()
    got = ev(e, P)[:3]
    check(got == ['PUT', 'once', 'o1'], 'watch_once %r' % got)
    t.step('watch_once', idle_timed_out=timed_out, event=got)

    # watch_prefix_once: etcd3gw 2.7.0 base64-encodes range_end twice here, so
    # the watch really covers [prefix, base64 text of the range end), a far
    # wider range (every key from the prefix up to 'L...'). The event is still
    # the one written under the prefix as long as nothing else writes.
    rep = Repeater(client, P + 'po/k', 'p1')
    try:
        e = client.watch_prefix_once(P + 'po/', timeout=5)
    finally:
        rep.stop()
    got = ev(e, P)[:3]
    check(got == ['PUT', 'po/k', 'p1'], 'watch_prefix_once %r' % got)
    t.step('watch_prefix_once', event=got)

    # Cancelled watches closed their sockets under the server; the client's
    # pooled keep-alive connections must still work.
    client.put(P + 'after', 'ok')
    check(client.get(P + 'after') == [b'ok'], 'client unusable after watches')
    t.step('after_watches', get=client.get(P + 'after')[0])

    cleanup()
    left = client.get_prefix(P)
    check(left == [], 'cleanup left %r' % left)
    t.step('cleanup', left=left)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--endpoint', required=True, help='host:port of one client URL')
    ap.add_argument('--prefix', default='/pyflows-gw/', help='key prefix for everything written')
    ap.add_argument('--deadline', type=float, default=55.0, help='watchdog: give up after this many seconds')
    ap.add_argument('--verbose', action='store_true')
    args = ap.parse_args()
    logging.basicConfig(stream=sys.stderr, level=logging.DEBUG if args.verbose else logging.WARNING,
                        format='%(asctime)s %(threadName)s %(name)s %(levelname)s: %(message)s')

    def watchdog():
        sys.stderr.write('FAIL: watchdog: run exceeded %.0f s\n' % args.deadline)
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(3)
    timer = threading.Timer(args.deadline, watchdog)
    timer.daemon = True
    timer.start()

    t = Transcript()
    started = time.time()
    try:
        run(args, t)
    except FlowError as e:
        sys.stdout.flush()
        sys.stderr.write('FAIL: after step %02d: %s\n' % (t.n, e))
        sys.stderr.flush()
        os._exit(1)
    except Exception:
        sys.stdout.flush()
        LOG.exception('FAIL: unexpected error after step %02d', t.n)
        sys.stderr.flush()
        os._exit(1)
    sys.stderr.write('etcd3gw_flows: %d steps passed in %.1f s\n' % (t.n, time.time() - started))
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: cancelled watchers' executor threads may still
    # be unwinding from their shut-down sockets.
    os._exit(0)


if __name__ == '__main__':
    main()
