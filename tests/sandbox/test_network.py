"""Network: a sandboxed command has no network at all, not even the server's own port on
127.0.0.1, no name resolution, no raw or netlink sockets, and sees no interface but lo."""
import socket
import uuid

from kgym_sbx import host_probe, run_host


def test_no_tcp_to_the_servers_own_port(srv, new_episode, probe_bin):
    port = srv.port
    # control: from the host the port answers, from bash and from the probe
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass
    r = run_host(["bash", "-c", f"exec 3<>/dev/tcp/127.0.0.1/{port}; echo rc=$?"])
    assert "rc=0" in r.stdout, (r.stdout, r.stderr)
    assert host_probe(probe_bin, "connect_tcp", "127.0.0.1", port)["connect_tcp"] == "OK"

    ep = new_episode()
    obs = ep.bash(f"exec 3<>/dev/tcp/127.0.0.1/{port}; echo rc=$?")
    assert not obs["is_error"], obs
    assert "rc=1" in obs["data"]["stdout"], obs
    assert "Address family not supported by protocol" in obs["data"]["stderr"], obs

    ep.install_probe(probe_bin)
    v = ep.probe("connect_tcp", "127.0.0.1", port)
    assert (v["connect_tcp"], v["connect_tcp_detail"]) == ("EAFNOSUPPORT", "(socket)"), v

    out = ep.sh(
        "python3 -c \"import errno, socket\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {port}), timeout=2); print('CONNECTED')\n"
        "except OSError as e:\n"
        "    print('ERR', errno.errorcode.get(e.errno))\"")
    assert out.strip() == "ERR EAFNOSUPPORT", out


def test_no_name_resolution(new_episode):
    # control: the host resolves localhost, with getent and with python
    assert run_host(["getent", "hosts", "localhost"]).returncode == 0
    r = run_host(["python3", "-c", "import socket; print(socket.getaddrinfo('localhost', 80)[0][4][0])"])
    assert r.returncode == 0 and r.stdout.strip(), r

    ep = new_episode()
    out = ep.sh("getent hosts localhost; echo rc=$?; getent hosts example.com; echo rc=$?; "
                "getent ahosts kgym.invalid; echo rc=$?")
    assert out.split() == ["rc=2", "rc=2", "rc=2"], out
    out = ep.sh(
        "python3 -c \"import socket\n"
        "for host in ('localhost', 'example.com', '127.0.0.1.nip.io'):\n"
        "    try:\n"
        "        print('RESOLVED', socket.getaddrinfo(host, 80))\n"
        "    except socket.gaierror as e:\n"
        "        print('gaierror')\"")
    assert out.split() == ["gaierror"] * 3, out


def test_no_raw_netlink_or_inet_sockets(new_episode, probe_bin):
    kinds = [("inet", "stream"), ("inet", "dgram"), ("inet6", "stream"), ("inet", "raw"),
             ("packet", "raw"), ("netlink", "dgram")]
    # control: root on the host gets every one of them
    for fam, typ in kinds:
        v = host_probe(probe_bin, "socket", fam, typ)
        assert v[f"socket_{fam}_{typ}"] == "OK", (fam, typ, v)

    ep = new_episode()
    ep.install_probe(probe_bin)
    for fam, typ in kinds + [("vsock", "stream"), ("alg", "dgram")]:
        v = ep.probe("socket", fam, typ)
        assert v[f"socket_{fam}_{typ}"] == "EAFNOSUPPORT", (fam, typ, v)
    # the one family the policy admits still works (the probe itself is fine in there)
    assert ep.probe("socket", "unix", "stream")["socket_unix_stream"] == "OK"
    # python's raw socket and iproute2 (netlink) fail the same way
    out = ep.sh("python3 -c \"import socket, errno\n"
                "try:\n"
                "    socket.socket(socket.AF_PACKET, socket.SOCK_RAW)\n"
                "    print('RAW')\n"
                "except OSError as e:\n"
                "    print(errno.errorcode[e.errno])\"; ip link 2>&1; echo rc=$?")
    assert out.splitlines()[0] == "EAFNOSUPPORT", out
    assert "Address family not supported" in out and "rc=1" in out, out


def test_only_loopback_and_no_host_sockets(srv, new_episode, probe_bin):
    # control: the host has more than lo, and its /proc/net/tcp lists the server's listener
    with open("/proc/net/dev") as f:
        host_ifaces = {line.split(":")[0].strip() for line in f.readlines()[2:]}
    assert host_ifaces - {"lo"}, host_ifaces
    port_hex = f":{srv.port:04X}"
    with open("/proc/net/tcp") as f:
        assert port_hex in f.read()

    ep = new_episode()
    out = ep.sh("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
    assert out.split() == ["lo"], out
    out = ep.sh("cat /proc/net/tcp /proc/net/tcp6 2>/dev/null; echo END")
    assert port_hex not in out, out
    out = ep.sh("ls /sys/class/net 2>&1; echo rc=$?")
    assert "No such file or directory" in out and "rc=2" in out, out


def test_no_abstract_unix_socket_of_the_host(new_episode, probe_bin):
    """Abstract unix sockets belong to the network namespace: a host listener is unreachable."""
    name = "kgym-sbx-test-" + uuid.uuid4().hex[:12]
    lst = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        lst.bind("\0" + name)
        lst.listen(4)
        # control: the probe reaches it from the host
        assert host_probe(probe_bin, "connect_abstract", name)["connect_abstract"] == "OK"
        ep = new_episode()
        ep.install_probe(probe_bin)
        v = ep.probe("connect_abstract", name)
        assert v["connect_abstract"] == "ECONNREFUSED", v
    finally:
        lst.close()
