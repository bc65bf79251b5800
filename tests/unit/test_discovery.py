"""imds.url = "discover": the wire server address from DHCP option 245, in lease files the tests write.

The lease files are the real formats of dhclient (also NetworkManager with its dhclient backend),
systemd-networkd and NetworkManager's internal client; their locations come from
``imds.lease_files`` (the same setting a user would give on an unusual distribution).
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
import textwrap

from hypothesis import given, settings
from hypothesis import strategies as st

from se_forwarder import config
from se_forwarder.discovery import FALLBACK_URL, decode_option, discover, option_245
from se_forwarder.imds import ImdsClient
from tests.support.paths import ROOT

DHCLIENT = textwrap.dedent("""\
    lease {
      interface "eth0";
      fixed-address 10.0.0.4;
      option subnet-mask 255.255.255.0;
      option dhcp-lease-time 4294967295;
      option routers 10.0.0.1;
      option dhcp-server-identifier 168.63.129.16;
      option domain-name-servers 168.63.129.16;
      option unknown-245 {option};
      option domain-name "abc.internal.cloudapp.net";
      renew 6 2026/11/25 01:48:29;
      rebind 6 2026/11/25 01:48:29;
      expire 6 2026/11/25 01:48:29;
    }
""")

NETWORKD = textwrap.dedent("""\
    # This is private data. Do not parse.
    ADDRESS=10.0.0.4
    NETMASK=255.255.255.0
    ROUTER=10.0.0.1
    SERVER_ADDRESS=168.63.129.16
    NEXT_SERVER=168.63.129.16
    T1=4294967295
    T2=4294967295
    LIFETIME=4294967295
    DNS=168.63.129.16
    DOMAINNAME=abc.internal.cloudapp.net
    OPTION_245={option}
""")


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_dhclient_lease_gives_the_wire_server(tmp_path):
    lease = write(tmp_path / "dhcp" / "dhclient.eth0.leases", DHCLIENT.replace("{option}", "a8:3f:81:10"))
    found = discover([str(tmp_path / "dhcp" / "dhclient*.leases")])
    assert (found.url, found.address, found.lease_file) == ("http://168.63.129.16", "168.63.129.16",
                                                             str(lease))


def test_dhclient_writes_one_digit_parts_and_quoted_strings_too(tmp_path):
    assert decode_option("a:3f:81:10") == "10.63.129.16"
    assert decode_option('"\\250?\\201\\020"') == "168.63.129.16"


def test_the_last_lease_of_a_dhclient_file_wins(tmp_path):
    text = DHCLIENT.replace("{option}", "a8:3f:81:10") + DHCLIENT.replace("{option}", "a:0:0:5")
    write(tmp_path / "dhclient.leases", text)
    assert discover([str(tmp_path / "*.leases")]).address == "10.0.0.5"


def test_systemd_networkd_lease_gives_the_wire_server(tmp_path):
    write(tmp_path / "netif" / "leases" / "2", NETWORKD.replace("{option}", "A83F8110"))
    assert discover([str(tmp_path / "netif" / "leases" / "*")]).url == "http://168.63.129.16"


def test_networkmanager_leases_in_either_backend_format(tmp_path):
    nm = tmp_path / "NetworkManager"
    write(nm / "internal-3b1c-eth0.lease", NETWORKD.replace("{option}", "a83f8110"))
    assert discover([str(nm / "*.lease")]).address == "168.63.129.16"
    os.remove(nm / "internal-3b1c-eth0.lease")
    write(nm / "dhclient-3b1c-eth0.lease", DHCLIENT.replace("{option}", "a8:3f:81:11"))
    assert discover([str(nm / "*.lease")]).address == "168.63.129.17"


def test_the_most_recently_written_lease_file_wins(tmp_path):
    old = write(tmp_path / "a.leases", DHCLIENT.replace("{option}", "a:0:0:1"))
    new = write(tmp_path / "b.leases", DHCLIENT.replace("{option}", "a:0:0:2"))
    os.utime(old, (1_000_000, 1_000_000))
    os.utime(new, (2_000_000, 2_000_000))
    assert discover([str(tmp_path / "*.leases")]).address == "10.0.0.2"
    os.utime(old, (3_000_000, 3_000_000))
    assert discover([str(tmp_path / "*.leases")]).address == "10.0.0.1"


def test_no_lease_with_option_245_falls_back_to_the_link_local_address(tmp_path):
    write(tmp_path / "dhclient.leases", DHCLIENT.replace("  option unknown-245 {option};\n", ""))
    write(tmp_path / "garbage.leases", "\x00\xff not a lease OPTION_245=zz option unknown-245 ;")
    found = discover([str(tmp_path / "*.leases"), str(tmp_path / "missing" / "*")])
    assert (found.url, found.address) == (FALLBACK_URL, None)
    assert "169.254.169.254" in found.describe()


def test_imds_client_and_config_accept_discover(tmp_path):
    write(tmp_path / "l.leases", DHCLIENT.replace("{option}", "7f:0:0:1"))
    settings = config.from_dict({"imds": {"url": "discover", "lease_files": [str(tmp_path / "*")]}})
    assert settings.imds.url == "discover"
    client = ImdsClient(settings.imds.url, lease_files=settings.imds.lease_files)
    try:
        assert client.events_url == "http://127.0.0.1/metadata/scheduledevents"
    finally:
        client.close()


def test_check_polls_the_discovered_endpoint(tmp_path):
    # 127.0.0.1 port 80: nothing listens there in the test, so the line names the discovered URL.
    write(tmp_path / "l.leases", DHCLIENT.replace("{option}", "7f:0:0:1"))
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[imds]\nurl = "discover"\nlease_files = ["{tmp_path}/*.leases"]\ntimeout = 1\n'
                   f'[state]\ndir = "{tmp_path}/state"\n')
    result = subprocess.run([sys.executable, "-m", "se_forwarder", "check", "--config", str(cfg)],
                            capture_output=True, text=True, cwd=ROOT, timeout=60)
    (line,) = [ln for ln in result.stdout.splitlines() if ln.split(":")[0].endswith(" imds")]
    assert "http://127.0.0.1/metadata/scheduledevents" in line, result.stdout


@settings(max_examples=200)
@given(st.ip_addresses(v=4).filter(lambda a: not (a.is_unspecified or a.is_multicast
                                                    or a.is_reserved)))
def test_every_written_form_of_an_address_reads_back(address):
    raw = address.packed
    forms = [":".join(f"{b:02x}" for b in raw), ":".join(f"{b:x}" for b in raw), raw.hex(),
             raw.hex().upper(), '"' + "".join(f"\\{b:03o}" for b in raw) + '"']
    for form in forms:
        assert decode_option(form) == str(address), form
    assert option_245(DHCLIENT.replace("{option}", forms[0])) == str(address)
    assert option_245(NETWORKD.replace("{option}", forms[2])) == str(address)


@settings(max_examples=300)
@given(st.text(max_size=300))
def test_any_text_is_an_address_or_nothing_never_an_error(text):
    found = option_245(text)
    assert found is None or ipaddress.IPv4Address(found)
    decoded = decode_option(text)
    assert decoded is None or ipaddress.IPv4Address(decoded)
