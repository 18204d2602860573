#!/usr/bin/env python3
"""Drive Patroni's own etcd3 DCS code through the gRPC-JSON gateway.

    patroni_flows.py --endpoints 127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3
                     [--scope NAME] [--auth] [--verbose]

Patroni (4.1.5) talks to etcd v3 only through the gateway: HTTP/1.1 POSTs of
JSON to /v3/kv/range, /v3/kv/put, /v3/kv/txn, /v3/lease/grant,
/v3/lease/keepalive, /v3/cluster/member/list, GET /version, and one long
chunked POST /v3/watch per DCS instance that feeds its key cache. This program
builds the DCS object exactly as Patroni does (patroni.dcs.get_dcs on a config
dict) and walks the calls Patroni's HA loop makes: the initialize race,
member keys on a lease, the leader race, keeping and losing the leader key,
config/history/failover/sync keys with and without compare-and-set, and
reading it all back, both linearizably (as patronictl does) and from the
watch-fed cache (as the HA loop does).

Standard output is the transcript: one line per step holding only outcomes
two correct servers must agree on (booleans, values, member and leader
names), never revisions, lease ids, cluster ids or timings, so the transcript
of a run against real etcd and one against another server can be compared
byte for byte. Any outcome that etcd's semantics rule out stops the run with
"FAIL: ..." on standard error and exit status 1. Patroni's own log goes to
standard error. A watchdog ends the whole run (exit 3) after --deadline
seconds, because several Patroni code paths retry forever while etcd is down.
"""

import argparse
import datetime
import json
import logging
import os
import sys
import threading
import time

LOG = logging.getLogger('patroni_flows')

# Patroni's member key for a node holds JSON like this; the HA loop writes it
# with touch_member(). 'version' matters: a member older than 2.1.0 would make
# write_status() also write the legacy /optime/leader key.
def member_data(name, role):
    return {
        'conn_url': 'postgres://replicator@127.0.0.1:5432/postgres',
        'api_url': 'http://127.0.0.1:8008/patroni',
        'state': 'running',
        'role': role,
        'version': '4.1.5',
        'xlog_location': 50331648,
        'timeline': 1,
    }


class FlowError(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise FlowError(msg)


class Transcript:
    """Numbered transcript lines on stdout, flushed one by one so a failing
    run still shows how far it got."""

    def __init__(self):
        self.n = 0

    def step(self, name, **fields):
        self.n += 1
        parts = ['%02d %s' % (self.n, name)]
        parts += ['%s=%s' % (k, fmt(v)) for k, v in fields.items()]
        print(' '.join(parts), flush=True)


def fmt(v):
    if isinstance(v, str):
        return v if v and ' ' not in v else json.dumps(v)
    if isinstance(v, (dict, list)):
        return json.dumps(v, sort_keys=True, separators=(',', ':'))
    return str(v)


def summary(c):
    """The parts of a patroni Cluster that must be equal on any two correct
    servers, as a dict. Versions (mod revisions) and sessions (lease ids) are
    left out on purpose."""
    return {
        'initialize': c.initialize,
        'config': c.config.data if c.config else None,
        'leader': c.leader.name if c.leader else None,
        'members': sorted('%s:%s' % (m.name, m.data.get('role')) for m in c.members),
        'failover': None if not c.failover else {
            'leader': c.failover.leader, 'member': c.failover.candidate,
            'scheduled_at': c.failover.scheduled_at.isoformat() if c.failover.scheduled_at else None},
        'sync': None if c.sync.is_empty else {
            'leader': c.sync.leader, 'sync_standby': c.sync.sync_standby, 'quorum': c.sync.quorum},
        'history': c.history.lines if c.history else None,
        'last_lsn': c.status.last_lsn,
        'failsafe': c.failsafe,
    }


def make_dcs(endpoints, scope, name, ctl=False, username=None, password=None):
    """Build an Etcd3 DCS object the way Patroni does: patroni.dcs.get_dcs on
    the config dict. get_dcs copies the top-level ttl/loop_wait/retry_timeout/
    scope/name/namespace/patronictl into the 'etcd3' section, imports the
    etcd3 module and passes the MPP (Citus) object, which is the no-op one
    here. The constructor reads GET /version, then POST
    /v3/cluster/member/list and from then on talks to the members' clientURLs
    (shuffled), not to the hosts listed here. A non-ctl instance also grants
    its lease and starts its KVCache watch thread."""
    from patroni.dcs import get_dcs
    etcd3 = {'hosts': list(endpoints)}
    if username:
        etcd3.update(username=username, password=password)
    config = {
        'scope': scope,
        'namespace': '/service/',
        'name': name,
        # ttl is the lease TTL of member and leader keys. Patroni's own default
        # is 30 s; 10 s keeps the expiry step short while staying far above
        # etcd's minimum lease TTL.
        'ttl': 10,
        # loop_wait throttles lease keepalives: _do_refresh_lease only sends
        # one if loop_wait seconds passed since the last one.
        'loop_wait': 2,
        'retry_timeout': 6,
        'etcd3': etcd3,
    }
    if ctl:
        # patronictl: no lease, no watch cache, linearizable reads.
        config['patronictl'] = True
    return get_dcs(config)


def wait_for(desc, fn, timeout):
    """Poll fn() until it returns a true value; bounded by timeout."""
    deadline = time.time() + timeout
    last = None
    while True:
        last = fn()
        if last:
            return last
        if time.time() >= deadline:
            raise FlowError('timed out after %.0f s waiting for %s' % (timeout, desc))
        time.sleep(0.1)


def cache_view(dcs, want, timeout=8.0, desc=''):
    """Read the cluster from dcs's watch-fed cache (Patroni's get_cluster for a
    non-ctl instance does not range the server: it copies KVCache), polling
    until want(summary) holds. The cache is filled by the /v3/watch stream, so
    a change made through another instance, or a lease expiry, shows up only
    after its watch event arrives."""
    box = {}

    def probe():
        c = dcs.get_cluster()
        box['s'] = summary(c)
        box['c'] = c
        return want(box['s'])
    try:
        wait_for(desc or 'cache view', probe, timeout)
    except FlowError as e:
        raise FlowError('%s; last view %s' % (e, fmt(box.get('s'))))
    return box['c']


class RangeCounter:
    """Counts range calls an instance makes, to tell a cache filled by the
    watch stream from one re-read with /v3/kv/range."""

    def __init__(self, dcs):
        self.count = 0
        client = dcs._client
        orig = client.range

        def counting_range(*a, **kw):
            self.count += 1
            return orig(*a, **kw)
        # The instance attribute shadows the class method; KVCache rebuilds
        # through client.prefix(), which calls self.range().
        client.range = counting_range


def settle(dcs):
    """After an instance's failed transaction Patroni restarts its watcher
    (PatroniEtcd3Client.txn kills the stream, KVCache re-ranges and re-watches).
    Give that restart time to start, then wait for the cache to be ready, so
    a later 'no range' check is not confused by it."""
    time.sleep(0.5)
    dcs.get_cluster()


def run(args, t):
    endpoints = [e.strip() for e in args.endpoints.split(',') if e.strip()]
    scope = args.scope

    # patronictl's view: linearizable range reads, no cache. Used to read back
    # every write at once, and to clean the scope's keys before and after.
    ctl = make_dcs(endpoints, scope, 'ctl', ctl=True)
    check(ctl._client.version_prefix == '/v3', 'expected /v3 API prefix, got %s' % ctl._client.version_prefix)
    ctl.delete_cluster()
    t.step('connect', api_prefix=ctl._client.version_prefix,
           cluster_version_at_least_3_4=ctl._client._cluster_version >= (3, 4))

    c = ctl.get_cluster()
    check(c.is_empty(), 'scope not empty after delete_cluster: %s' % fmt(summary(c)))
    t.step('empty_cluster', is_empty=c.is_empty())

    a = make_dcs(endpoints, scope, 'pg0')
    b = make_dcs(endpoints, scope, 'pg1')
    cc = make_dcs(endpoints, scope, 'pg2')
    for d in (a, b, cc):
        check(d._lease, '%s has no lease after start' % d._name)
    t.step('start_nodes', names='pg0,pg1,pg2', each_has_lease=True)

    # --- initialize race: a compare-and-create txn on /initialize ---------
    # initialize() returns the txn response (a dict), empty when the compare
    # failed, so truthiness is the outcome.
    ra = bool(a.initialize(create_new=True, sysid=''))
    rb = bool(b.initialize(create_new=True, sysid=''))
    check(ra and not rb, 'initialize race: pg0=%r pg1=%r' % (ra, rb))
    t.step('initialize_race', pg0=ra, pg1=rb)
    c = ctl.get_cluster()
    check(c.initialize == '', 'initialize key should exist with empty value: %r' % c.initialize)
    t.step('initialize_key', value=repr(c.initialize))

    ok = bool(a.cancel_initialization())
    c = ctl.get_cluster()
    check(ok and c.initialize is None, 'cancel_initialization: %r, key %r' % (ok, c.initialize))
    rb, ra = bool(b.initialize(create_new=True)), bool(a.initialize(create_new=True))
    check(rb and not ra, 'second initialize race: pg1=%r pg0=%r' % (rb, ra))
    # After bootstrap Patroni stores the system identifier with a plain put.
    rs = bool(b.initialize(create_new=False, sysid='7312345678901234567'))
    c = ctl.get_cluster()
    check(rs and c.initialize == '7312345678901234567', 'set sysid: %r %r' % (rs, c.initialize))
    t.step('initialize_again', cancel=ok, pg1=rb, pg0=ra, sysid_set=rs,
           value=c.initialize)

    # --- member keys, each on its node's lease -----------------------------
    res = [bool(d.touch_member(member_data(d._name, r)))
           for d, r in ((a, 'primary'), (b, 'replica'), (cc, 'replica'))]
    check(all(res), 'touch_member: %r' % res)
    c = ctl.get_cluster()
    s = summary(c)
    check(s['members'] == ['pg0:primary', 'pg1:replica', 'pg2:replica'], 'members %r' % s['members'])
    on_own_lease = all(m.session == {'pg0': a, 'pg1': b, 'pg2': cc}[m.name]._lease for m in c.members)
    check(on_own_lease, 'member keys not on their own leases')
    t.step('touch_member', pg0=res[0], pg1=res[1], pg2=res[2], members=s['members'],
           each_on_own_lease=on_own_lease)

    # Unchanged data on the same lease: Patroni skips the write.
    res2 = a.touch_member(member_data('pg0', 'primary'))
    check(res2 is True, 'repeat touch_member %r' % res2)
    t.step('touch_member_unchanged', pg0=res2)

    # --- the watch-fed cache sees another instance's write -----------------
    # pg2's get_cluster copies its KVCache; count its range calls to show the
    # new member data arrived over its /v3/watch stream, not by re-reading.
    counter = RangeCounter(cc)
    settle(cc)
    before = counter.count
    b.touch_member(member_data('pg1', 'sync_standby'))
    c = cache_view(cc, lambda s: 'pg1:sync_standby' in s['members'], desc='pg2 to see pg1 change role')
    via_watch = counter.count == before
    check(via_watch, 'pg2 re-read the keys (%d range calls) instead of using its watch' % (counter.count - before))
    t.step('watch_cache_sees_other_node', observer='pg2', members=summary(c)['members'], via_watch=via_watch)

    # --- leader race under a lease ------------------------------------------
    # attempt_to_acquire_leader() returns the txn response too (create
    # revision == 0 -> put with the lease).
    la = bool(a.attempt_to_acquire_leader())
    lb = bool(b.attempt_to_acquire_leader())
    lc = bool(cc.attempt_to_acquire_leader())
    check(la and not lb and not lc, 'leader race: %r %r %r' % (la, lb, lc))
    c = ctl.get_cluster()
    check(c.leader and c.leader.name == 'pg0' and c.leader.session == a._lease, 'leader after race')
    t.step('leader_race', pg0=la, pg1=lb, pg2=lc, leader=c.leader.name, leader_on_pg0_lease=c.leader.session == a._lease)

    # The other nodes learn the leader from their caches.
    for d in (b, cc):
        cache_view(d, lambda s: s['leader'] == 'pg0', desc='%s to see leader pg0' % d._name)
    t.step('leader_seen_by_caches', pg1='pg0', pg2='pg0')

    # --- update_leader: keepalive + /status, /failsafe ----------------------
    ca = a.get_cluster()
    ok = a.update_leader(ca, last_lsn=50331648, failsafe={'pg0': 'http://127.0.0.1:8008/patroni',
                                                          'pg1': 'http://127.0.0.1:8009/patroni'})
    c = ctl.get_cluster()
    check(ok is True and c.status.last_lsn == 50331648 and c.failsafe and 'pg1' in c.failsafe,
          'update_leader %r lsn %r failsafe %r' % (ok, c.status.last_lsn, c.failsafe))
    t.step('update_leader', pg0=ok, last_lsn=c.status.last_lsn, failsafe=sorted(c.failsafe))

    # A node that is not the leader: its lease differs from the key's, the
    # value compare fails and so does the nested create, so False.
    cb = b.get_cluster()
    okb = b.update_leader(cb, last_lsn=1)
    c = ctl.get_cluster()
    check(okb is False and c.leader.name == 'pg0' and c.status.last_lsn == 50331648,
          'non-leader update_leader %r, leader %s lsn %r' % (okb, c.leader.name, c.status.last_lsn))
    t.step('update_leader_not_leader', pg1=okb, leader=c.leader.name, last_lsn=c.status.last_lsn)

    # --- pg0 restarts: a new process, new lease, same name ------------------
    # Its leader key still lives on the old lease. update_leader sees
    # session != lease and runs txn(value == pg0 -> put with new lease), the
    # first branch succeeds.
    a_old = a
    a = make_dcs(endpoints, scope, 'pg0')
    check(a._lease != a_old._lease, 'restarted pg0 got the same lease')
    ca = cache_view(a, lambda s: s['leader'] == 'pg0', desc='restarted pg0 to see its leader key')
    ok = a.update_leader(ca, last_lsn=50331700)
    tm = a.touch_member(member_data('pg0', 'primary'))
    c = ctl.get_cluster()
    moved = c.leader is not None and c.leader.session == a._lease and c.leader.session != a_old._lease
    mem_moved = any(m.name == 'pg0' and m.session == a._lease for m in c.members)
    check(ok is True and tm and moved and mem_moved, 'restart: update_leader %r touch %r moved %r/%r' % (ok, tm, moved, mem_moved))
    t.step('restart_keeps_leader', pg0=ok, leader=c.leader.name, leader_on_new_lease=moved,
           member_on_new_lease=mem_moved, last_lsn=c.status.last_lsn)

    # --- the leader key expires with its lease ------------------------------
    # pg0 stops (nothing refreshes its lease any more); pg1 and pg2 keep
    # running their HA loop (touch_member keeps their leases alive). Both the
    # leader key and pg0's member key are on pg0's lease, so both vanish when
    # it expires; pg1 sees that through its watch (DELETE events).
    t0 = time.time()
    deadline = t0 + a.ttl + 12

    def expired():
        for d, role in ((b, 'sync_standby'), (cc, 'replica')):
            d.touch_member(member_data(d._name, role))
        s = summary(b.get_cluster())
        return s['leader'] is None and not any(m.startswith('pg0:') for m in s['members'])
    wait_for('pg0 leader key to expire with its lease', expired, deadline - time.time())
    check(time.time() - t0 >= a.ttl - 3, 'leader key vanished after %.1f s, before its %d s TTL'
          % (time.time() - t0, a.ttl))
    c = ctl.get_cluster()
    s = summary(c)
    check(s['leader'] is None and s['members'] == ['pg1:sync_standby', 'pg2:replica'], 'after expiry %s' % fmt(s))
    t.step('leader_expired', leader=s['leader'], members=s['members'], not_before_ttl=True)

    # pg1 takes over; pg2 loses.
    lb, lc = bool(b.attempt_to_acquire_leader()), bool(cc.attempt_to_acquire_leader())
    check(lb and not lc, 'second leader race %r %r' % (lb, lc))
    t.step('leader_race_after_expiry', pg1=lb, pg2=lc, leader=ctl.get_cluster().leader.name)

    # pg0 comes back: its keepalive finds the lease gone (keepalive answers
    # without TTL), so it grants a new lease and re-creates its member key.
    old_lease = a._lease
    tm = a.touch_member(member_data('pg0', 'replica'))
    check(tm is True and a._lease and a._lease != old_lease, 'pg0 rejoin %r' % tm)
    ca = cache_view(a, lambda s: s['leader'] == 'pg1' and 'pg0:replica' in s['members'], desc='pg0 to see pg1 lead')
    # Deposed pg0 tries to keep the leader key: value compare fails (pg1 holds
    # it), nested create fails (key exists), so False.
    up = a.update_leader(ca, last_lsn=1)
    dl = a.delete_leader(ca.leader)
    c = ctl.get_cluster()
    check(up is False and dl is False and c.leader.name == 'pg1', 'deposed pg0 %r %r' % (up, dl))
    t.step('deposed_node', rejoined=tm, new_lease=True, update_leader=up, delete_leader=dl, leader=c.leader.name)

    # --- delete_leader by the leader (it writes /status first) ------------
    cb = b.get_cluster()
    dl = b.delete_leader(cb.leader, last_lsn=50331800)
    c = ctl.get_cluster()
    check(dl is True and c.leader is None and c.status.last_lsn == 50331800, 'delete_leader %r' % dl)
    t.step('delete_leader', pg1=dl, leader=None, last_lsn=c.status.last_lsn)
    for d in (a, cc):
        cache_view(d, lambda s: s['leader'] is None, desc='%s to see no leader' % d._name)

    # --- a real race: all three at once, exactly one wins -------------------
    results = {}
    barrier = threading.Barrier(3, timeout=10)

    def racer(d):
        barrier.wait()
        results[d._name] = bool(d.attempt_to_acquire_leader())
    threads = [threading.Thread(target=racer, args=(d,), daemon=True) for d in (a, b, cc)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(20)
    check(len(results) == 3, 'race threads did not finish: %r' % results)
    winners = [n for n, r in results.items() if r is True]
    check(len(winners) == 1 and all(r is False for n, r in results.items() if n not in winners),
          'concurrent race results %r' % results)
    c = ctl.get_cluster()
    check(c.leader and c.leader.name == winners[0], 'leader %r vs winner %r' % (c.leader, winners))
    winner = {'pg0': a, 'pg1': b, 'pg2': cc}[winners[0]]
    check(c.leader.session == winner._lease, 'leader key not on the winner\'s lease')
    dl = winner.delete_leader(c.leader)
    check(dl is True and ctl.get_cluster().leader is None, 'winner delete_leader %r' % dl)
    t.step('concurrent_leader_race', winners=len(winners), leader_is_winner=True, winner_deleted=dl)

    # --- update_leader re-creates a vanished key (nested txn) --------------
    # pg1 leads, then restarts (new lease). Its stale view still shows itself
    # as leader when the key is deleted underneath; update_leader's first
    # compare (value == pg1) fails on the missing key and the nested txn
    # (create_revision == 0 -> put) succeeds: responses[0].response_txn.
    for d in (a, cc):
        settle(d)
    lb = bool(b.attempt_to_acquire_leader())
    check(lb, 'pg1 attempt %r' % lb)
    b_old = b
    b = make_dcs(endpoints, scope, 'pg1')
    stale = cache_view(b, lambda s: s['leader'] == 'pg1', desc='restarted pg1 to see itself lead')
    dl = b_old.delete_leader(ctl.get_cluster().leader)
    check(dl is True and ctl.get_cluster().leader is None, 'delete under pg1: %r' % dl)
    up = b.update_leader(stale, None)
    tm = b.touch_member(member_data('pg1', 'primary'))
    c = ctl.get_cluster()
    check(up is True and tm and c.leader and c.leader.name == 'pg1' and c.leader.session == b._lease,
          'nested create: %r %r' % (up, c.leader))
    t.step('update_leader_recreates_key', pg1=up, leader=c.leader.name, on_new_lease=True)

    # --- dynamic configuration: put, then compare-and-set on mod revision --
    cfg1 = {'ttl': 10, 'loop_wait': 2, 'retry_timeout': 6, 'postgresql': {'parameters': {'max_connections': 100}}}
    ok1 = b.set_config_value(json.dumps(cfg1, separators=(',', ':')))
    c1 = ctl.get_cluster()
    check(ok1 is True and c1.config.data == cfg1, 'set_config_value %r %r' % (ok1, c1.config))
    cfg2 = dict(cfg1, maximum_lag_on_failover=1048576)
    ok2 = a.set_config_value(json.dumps(cfg2, separators=(',', ':')), version=c1.config.version)
    cfg3 = dict(cfg1, synchronous_mode=True)
    # Same (now stale) version again: the mod_revision compare fails.
    ok3 = cc.set_config_value(json.dumps(cfg3, separators=(',', ':')), version=c1.config.version)
    c = ctl.get_cluster()
    check(ok2 is True and ok3 is False and c.config.data == cfg2, 'config CAS %r %r %r' % (ok2, ok3, c.config.data))
    t.step('set_config_value', plain=ok1, cas_current=ok2, cas_stale=ok3, config=c.config.data)

    # --- timeline history -----------------------------------------------------
    hist = [[1, 25165984, 'no recovery target specified', '2024-01-01T00:00:00+00:00', 'pg0']]
    ok = b.set_history_value(json.dumps(hist, separators=(',', ':')))
    c = ctl.get_cluster()
    check(ok is True and c.history.lines == hist, 'history %r %r' % (ok, c.history))
    t.step('set_history_value', ok=ok, lines=c.history.lines)

    # --- manual failover / switchover key ------------------------------------
    ok1 = cc.manual_failover('pg1', 'pg2')
    c1 = ctl.get_cluster()
    check(ok1 is True and c1.failover.leader == 'pg1' and c1.failover.candidate == 'pg2', 'failover %r' % (c1.failover,))
    when = datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
    ok2 = cc.manual_failover('pg1', 'pg0', scheduled_at=when, version=c1.failover.version)
    ok3 = a.manual_failover('', 'pg0', version=c1.failover.version)
    c = ctl.get_cluster()
    s = summary(c)
    check(ok2 is True and ok3 is False and s['failover'] == {'leader': 'pg1', 'member': 'pg0',
                                                             'scheduled_at': when.isoformat()},
          'failover CAS %r %r %r' % (ok2, ok3, s['failover']))
    t.step('manual_failover', plain=ok1, cas_current=ok2, cas_stale=ok3, failover=s['failover'])

    # --- synchronous replication state ---------------------------------------
    st1 = b.write_sync_state('pg1', ['pg2'], 0)
    check(st1 is not None and st1.leader == 'pg1' and st1.sync_standby == 'pg2', 'write_sync_state %r' % (st1,))
    # The version returned is the txn/put header revision; it must equal the
    # key's mod revision for the next compare-and-set to succeed.
    st2 = b.write_sync_state('pg1', ['pg0', 'pg2'], 1, version=st1.version)
    st3 = b.write_sync_state('pg1', ['pg0'], 0, version=st1.version)
    c = ctl.get_cluster()
    s = summary(c)
    check(st2 is not None and st3 is None and s['sync'] == {'leader': 'pg1', 'sync_standby': 'pg0,pg2', 'quorum': 1},
          'sync CAS %r %r %r' % (st2, st3, s['sync']))
    t.step('write_sync_state', plain=True, cas_current=True, cas_stale_is_none=st3 is None, sync=s['sync'])
    d_stale = bool(b.delete_sync_state(version=st1.version))
    d_cur = bool(b.delete_sync_state(version=c.sync.version))
    c = ctl.get_cluster()
    check(d_stale is False and d_cur is True and c.sync.is_empty, 'delete_sync_state %r %r' % (d_stale, d_cur))
    sv = b.set_sync_state_value(json.dumps({'leader': 'pg1', 'sync_standby': 'pg2', 'quorum': None}))
    c = ctl.get_cluster()
    check(sv and summary(c)['sync'] == {'leader': 'pg1', 'sync_standby': 'pg2', 'quorum': 0}, 'set_sync_state_value')
    t.step('sync_state_delete_and_set', delete_stale=d_stale, delete_current=d_cur, set_value=bool(sv),
           sync=summary(c)['sync'])

    # --- every node's cache converges on the linearizable view -------------
    # One HA-loop heartbeat first (touch_member with unchanged data only sends
    # a lease keepalive), so no member key can expire while a slow server is
    # still being checked.
    for d, role in ((a, 'replica'), (b, 'primary'), (cc, 'replica')):
        check(d.touch_member(member_data(d._name, role)), 'heartbeat %s' % d._name)
    want = summary(ctl.get_cluster())
    expected = {
        'initialize': '7312345678901234567',
        'config': cfg2,
        'leader': 'pg1',
        'members': ['pg0:replica', 'pg1:primary', 'pg2:replica'],
        'failover': {'leader': 'pg1', 'member': 'pg0', 'scheduled_at': when.isoformat()},
        'sync': {'leader': 'pg1', 'sync_standby': 'pg2', 'quorum': 0},
        'history': hist,
        'last_lsn': 50331800,
        'failsafe': {'pg0': 'http://127.0.0.1:8008/patroni', 'pg1': 'http://127.0.0.1:8009/patroni'},
    }
    check(want == expected, 'final linearizable view %s, expected %s' % (fmt(want), fmt(expected)))
    for d in (a, b, cc):
        cache_view(d, lambda s: s == want, desc='%s cache to match the linearizable view' % d._name)
    t.step('final_view', **want)
    t.step('caches_converged', nodes='pg0,pg1,pg2')

    ok = ctl.delete_cluster()
    c = ctl.get_cluster()
    check(bool(ok) and c.is_empty(), 'cleanup')
    t.step('delete_cluster', ok=bool(ok), empty=c.is_empty())

    if args.auth:
        # A scope of its own, so nothing above (leases still counting down on
        # the main scope) can interfere.
        run_auth(args, t, endpoints, scope + '-auth')


def gw_post(endpoint, path, body, token=None, timeout=5.0):
    """One plain gateway call, used only to set up and tear down auth (Patroni
    never manages users). Returns (status, parsed JSON)."""
    import urllib3
    headers = {'Content-Type': 'application/json'}
    if token:
        headers['Authorization'] = token
    r = urllib3.request('POST', 'http://%s%s' % (endpoint, path), body=json.dumps(body).encode(),
                        headers=headers, timeout=timeout, retries=False)
    try:
        return r.status, json.loads(r.data.decode() or '{}')
    except ValueError:
        return r.status, {'raw': r.data.decode(errors='replace')}


def run_auth(args, t, endpoints, scope):
    """Patroni with etcd authentication: it POSTs /v3/auth/authenticate and then
    sends the token, raw (no 'Bearer'), in a lower-case 'authorization' header
    on every call, the /v3/watch stream included. Auth is enabled here and
    disabled again before returning, so the cluster is left as found."""
    import base64
    from patroni.dcs.etcd3 import prefix_range_end
    ep = endpoints[0]
    b64 = lambda s: base64.b64encode(s if isinstance(s, bytes) else s.encode()).decode()
    prefix = '/service/%s/' % scope
    setup = [
        ('/v3/auth/user/add', {'name': 'root', 'password': 'rootpw'}),
        ('/v3/auth/user/grant', {'user': 'root', 'role': 'root'}),
        ('/v3/auth/role/add', {'name': 'patroni'}),
        ('/v3/auth/role/grant', {'name': 'patroni', 'perm': {'permType': 'READWRITE', 'key': b64(prefix),
                                                             'range_end': b64(prefix_range_end(prefix))}}),
        ('/v3/auth/user/add', {'name': 'patroni', 'password': 'patronipw'}),
        ('/v3/auth/user/grant', {'user': 'patroni', 'role': 'patroni'}),
        ('/v3/auth/enable', {}),
    ]
    for path, body in setup:
        st, resp = gw_post(ep, path, body)
        check(st == 200, 'auth setup %s: %s %s' % (path, st, resp))
    root_token = None
    try:
        st, resp = gw_post(ep, '/v3/auth/authenticate', {'name': 'root', 'password': 'rootpw'})
        check(st == 200 and resp.get('token'), 'root authenticate: %s %s' % (st, resp))
        root_token = resp['token']
        t.step('auth_enabled', users='patroni,root', patroni_role_prefix=prefix)

        # Wrong password: Patroni logs the failure and exits at start-up.
        try:
            make_dcs(endpoints, scope, 'pgx', username='patroni', password='wrong')
            exited = False
        except SystemExit as e:
            exited = e.code == 1
        check(exited, 'a wrong password should make Patroni exit(1) at start-up')
        t.step('auth_wrong_password', patroni_exits=exited)

        p = make_dcs(endpoints, scope, 'pa0', username='patroni', password='patronipw')
        q = make_dcs(endpoints, scope, 'pa1', username='patroni', password='patronipw')
        check(p._client._token and q._client._token, 'no token after authenticate')
        tp = p.touch_member(member_data('pa0', 'replica'))
        tq = q.touch_member(member_data('pa1', 'replica'))
        la, lb = bool(p.attempt_to_acquire_leader()), bool(q.attempt_to_acquire_leader())
        check(tp and tq and la and not lb, 'auth flows %r %r %r %r' % (tp, tq, la, lb))
        t.step('auth_flows', touch_member_pa0=bool(tp), touch_member_pa1=bool(tq), leader_race_pa0=la,
               leader_race_pa1=lb)
        # q's cache is fed by its authenticated watch stream.
        cq = cache_view(q, lambda s: s['leader'] == 'pa0' and 'pa0:replica' in s['members'],
                        desc='authenticated watch to deliver pa0 leader')
        dl = p.delete_leader(p.get_cluster().leader)
        cq = cache_view(q, lambda s: s['leader'] is None, desc='authenticated watch to deliver leader delete')
        t.step('auth_watch_cache', saw_leader='pa0', delete_leader=dl, then_leader=summary(cq)['leader'])
        # Tidy the scope while the patroni user still may (its leases would
        # otherwise keep the member keys for ttl seconds).
        ok = p.delete_cluster()
        check(bool(ok) and p._client.prefix(prefix, serializable=False).get('count') is None, 'auth cleanup')
    finally:
        if root_token:
            st, resp = gw_post(ep, '/v3/auth/disable', {}, token=root_token)
            check(st == 200, 'auth disable: %s %s' % (st, resp))
            for path, body in [('/v3/auth/user/delete', {'name': 'patroni'}),
                               ('/v3/auth/role/delete', {'role': 'patroni'}),
                               ('/v3/auth/user/delete', {'name': 'root'})]:
                gw_post(ep, path, body)
    t.step('auth_disabled', ok=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--endpoints', required=True, help='host:port,host:port,... of the client URLs')
    ap.add_argument('--scope', default='pyflows', help='Patroni cluster name (keys under /service/SCOPE/)')
    ap.add_argument('--auth', action='store_true',
                    help='also enable etcd auth, run Patroni with a user, and disable auth again')
    ap.add_argument('--deadline', type=float, default=55.0, help='watchdog: give up after this many seconds')
    ap.add_argument('--verbose', action='store_true', help='Patroni debug log on stderr')
    args = ap.parse_args()

    logging.basicConfig(stream=sys.stderr, level=logging.DEBUG if args.verbose else logging.WARNING,
                        format='%(asctime)s %(threadName)s %(name)s %(levelname)s: %(message)s')

    # Patroni retries forever in places (waiting for etcd at start-up, lease
    # grant), and its watch threads never end; a timer thread bounds the run
    # however it gets stuck.
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
    sys.stderr.write('patroni_flows: %d steps passed in %.1f s\n' % (t.n, time.time() - started))
    sys.stdout.flush()
    sys.stderr.flush()
    # os._exit: Patroni's watch and DNS threads are daemons, but skipping
    # interpreter teardown avoids noise from them while sockets close.
    os._exit(0)


if __name__ == '__main__':
    main()
