"""After every attack of the suite (this module runs last): both servers are healthy with the
sandbox active, the bystander episode's files are exactly as they were, and no process of any
episode uid is left on the host, nor a busy command cgroup."""
from kgym_sbx import (SMALL_UID_BASE, SRV_UID_BASE, UID_SPAN, assert_sandbox_healthy,
                      busy_cgroups, host_procs_in_uid_range, wait_until)


def test_after_the_suite(srv, small, bystander):
    for s in (srv, small):
        assert_sandbox_healthy(s)
    bystander.check()
    for base in (SRV_UID_BASE, SMALL_UID_BASE):
        # the bystander has no process running either: it only ever ran foreground commands
        assert wait_until(lambda: host_procs_in_uid_range(base, base + UID_SPAN) == [], 3), \
            host_procs_in_uid_range(base, base + UID_SPAN)
    for s in (srv, small):
        assert busy_cgroups(s) == {}
    # the bystander still works normally
    assert bystander.ep.sh("id -u").strip() == str(bystander.ep.uid)
