"""Ed25519 (RFC 8032, SHA-512) implementations for the coordinator's report verification, side by
side in one run, on one thread, against ``json.loads`` of the same report texts.

The reports are what the coordinator reads from the hub: agents' heartbeats and transitions
(bench/coordinator_fold.py's shapes), each signed by its VM's own key with the agent's code
(``approvals.signing.sign``: Ed25519 over the canonical form). Every implementation verifies the
same (canonical bytes, signature, public key) triples, timed with this thread's CPU clock. For
each, the figures are:

- ``verify``: one verification with the VM's public key object made beforehand (a coordinator
  keeps one per registered VM): microseconds and verifications per second, and the ratio to
  ``json.loads`` of the report's text (what the fold is compared to);
- ``key load``: making the public key object from its 32 raw bytes, and ``load + verify``, what
  a verification costs without a cache of key objects;
- ``batch``: a batch verification where the library has one (none of these bindings does).

Before timing, every implementation must accept every report and refuse a report with one byte of
its canonical form changed; one that does not is shown as unusable, not timed. Implementations
that are not installed are listed with the pip package that brings them. Prints figures; asserts
nothing.

    .venv/bin/python bench/ed25519_impls.py [--reports 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import base64
import json
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from se_forwarder.approvals import signing  # noqa: E402

T0 = 1_790_000_000.0


def iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def vm(i: int) -> dict[str, Any]:
    name = f"vm-{i:06d}"
    rid = (f"/subscriptions/sub-{i % 7}/resourceGroups/rg-{i % 31}"
           f"/providers/Microsoft.Compute/virtualMachines/{name}")
    return {"vmId": f"{i:08x}-0000-4000-8000-{i:012x}", "name": name, "resourceId": rid,
            "subscriptionId": f"sub-{i % 7}", "resourceGroupName": f"rg-{i % 31}", "location": "westeurope",
            "zone": str(1 + i % 3), "platformFaultDomain": str(i % 3), "platformUpdateDomain": str(i % 5),
            "vmScaleSetName": f"vmss-{i % 31}", "tags": {"role": "web"}}


def report(i: int) -> dict[str, Any]:
    """A heartbeat (four in five) or a ``scheduled`` transition of VM ``i``, as agents send them."""
    v, t = vm(i), T0 + i % 60
    if i % 5:
        return {"specversion": "1.0", "type": "com.azure.scheduledevents.heartbeat",
                "id": f"heartbeat/{v['vmId']}/{int(t)}", "source": v["resourceId"], "subject": v["vmId"],
                "time": iso(t), "datacontenttype": "application/json", "vmid": v["vmId"],
                "data": {"AgentVersion": "0.2.0", "HeartbeatInterval": 60, "LastPollUtc": iso(t),
                         "DocumentIncarnation": 4, "Events": [], "EnrichmentComplete": True,
                         "Backlog": {"hub": 0}, "Vm": v}}
    event_id = f"{i:08X}-1111-4222-8333-444455556666"
    return {"specversion": "1.0", "type": "com.azure.scheduledevents.scheduled",
            "id": f"{event_id}/scheduled", "source": v["resourceId"], "subject": event_id,
            "time": iso(t), "datacontenttype": "application/json",
            "eventtype": "Reboot", "eventstatus": "Scheduled", "incarnation": 4, "vmid": v["vmId"],
            "data": {"EventId": event_id, "EventType": "Reboot", "ResourceType": "VirtualMachine",
                     "Resources": [v["name"]], "EventStatus": "Scheduled", "NotBefore": "",
                     "Description": "maintenance", "EventSource": "Platform", "DurationInSeconds": 9,
                     "NotBeforeUtc": iso(t + 900), "DocumentIncarnation": 4, "AffectsThisVm": True,
                     "Vm": v}}


@dataclass(frozen=True)
class Signed:
    text: str  # the report as it arrives from the hub
    data: bytes  # its canonical form: what the signature covers
    signature: bytes
    public: bytes  # the VM's raw 32-byte public key


def make_reports(n: int, keys: int) -> list[Signed]:
    """``n`` signed reports from ``keys`` VMs (their own key each)."""
    private = [signing.generate_private_key() for _ in range(keys)]
    out = []
    for i in range(n):
        key = private[i % keys]
        message = signing.sign(report(i % keys + keys * (i // keys)), key)
        out.append(Signed(json.dumps(message), signing.canonical(message),
                          base64.b64decode(message["signature"]), signing.raw_public(key)))
    return out


@dataclass(frozen=True)
class Impl:
    name: str  # the binding, and what it wraps
    package: str  # pip package
    load: Callable[[bytes], Any]  # raw public key -> the object verify takes
    verify: Callable[[Any, bytes, bytes], bool]  # (key object, data, signature) -> valid
    note: str = ""


def implementations() -> tuple[list[Impl], list[str]]:
    """The implementations importable here, and a line for each that is not."""
    found: list[Impl] = []
    missing: list[str] = []

    def cryptography_impl() -> Impl:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        def verify(key: Any, data: bytes, sig: bytes) -> bool:
            try:
                key.verify(sig, data)
                return True
            except InvalidSignature:
                return False

        import cryptography
        from cryptography.hazmat.backends.openssl import backend
        return Impl(f"cryptography {cryptography.__version__} ({backend.openssl_version_text()})",
                    "cryptography", Ed25519PublicKey.from_public_bytes, verify, "today's")

    def pynacl_impl() -> Impl:
        import nacl
        from nacl.exceptions import BadSignatureError
        from nacl.signing import VerifyKey

        def verify(key: Any, data: bytes, sig: bytes) -> bool:
            try:
                key.verify(data, sig)
                return True
            except BadSignatureError:
                return False

        return Impl(f"PyNaCl {nacl.__version__} (its bundled libsodium)", "pynacl", VerifyKey, verify)

    def pysodium_impl() -> Impl:
        import pysodium

        def verify(key: Any, data: bytes, sig: bytes) -> bool:
            try:
                pysodium.crypto_sign_verify_detached(sig, data, key)
                return True
            except ValueError:
                return False

        return Impl("pysodium (ctypes, the system's libsodium)", "pysodium", bytes, verify,
                    "no key object: the raw key each call")

    def pycryptodome_impl() -> Impl:
        import Crypto
        from Crypto.Signature import eddsa

        def verify(key: Any, data: bytes, sig: bytes) -> bool:
            try:
                eddsa.new(key, "rfc8032").verify(data, sig)
                return True
            except ValueError:
                return False

        return Impl(f"PyCryptodome {Crypto.__version__}", "pycryptodome", eddsa.import_public_key, verify)

    def zebra_impl() -> Impl:
        import ed25519_zebra

        def verify(key: Any, data: bytes, sig: bytes) -> bool:
            return bool(ed25519_zebra.ed_verify(sig, data, key))

        return Impl("py-ed25519-zebra-bindings (Rust ed25519-zebra)", "py-ed25519-zebra-bindings",
                    bytes, verify, "ZIP 215 rules, not RFC 8032's; no key object")

    for make, package in ((cryptography_impl, "cryptography"), (pynacl_impl, "pynacl"),
                          (pysodium_impl, "pysodium"), (pycryptodome_impl, "pycryptodome"),
                          (zebra_impl, "py-ed25519-zebra-bindings")):
        try:
            found.append(make())
        except (ImportError, OSError) as exc:  # OSError: pysodium without a libsodium
            missing.append(f"{package}: not installed here ({type(exc).__name__}: {exc}); "
                           f"pip install {package}")
    return found, missing


def agrees(impl: Impl, reports: list[Signed]) -> str | None:
    """Why ``impl`` cannot be used (None: it accepts every report and refuses tampered ones)."""
    for r in reports:
        key = impl.load(r.public)
        if not impl.verify(key, r.data, r.signature):
            return "refuses a valid report"
        tampered = bytearray(r.data)
        tampered[len(tampered) // 2] ^= 0x01
        if impl.verify(key, bytes(tampered), r.signature):
            return "accepts a tampered report"
    return None


def timed(work: Callable[[], object], count: int) -> float:
    """CPU seconds of this thread per item, over one pass of ``count`` items (time spent
    descheduled by a busy machine is not counted; its cold caches are)."""
    began = time.thread_time()
    work()
    return (time.thread_time() - began) / count


def measure(reports: list[Signed], impls: list[Impl], rounds: int) -> list[tuple[str, ...]]:
    """The table's rows. Every pass of every figure runs once per round, in turn, and the fastest
    round counts: a machine that gets busier for a while slows every figure, not one."""
    n = len(reports)
    texts = [r.text for r in reports]
    messages = [json.loads(t) for t in texts]
    usable: list[Impl] = []
    rows: list[tuple[str, ...]] = []
    for impl in impls:
        problem = agrees(impl, reports[:200])
        if problem:
            rows.append((impl.name, "unusable", problem, "", "", impl.note))
        else:
            usable.append(impl)
    passes: dict[str, Callable[[], object]] = {
        "loads": lambda: [json.loads(t) for t in texts],
        "canonical": lambda: [signing.canonical(m) for m in messages],
    }
    raws = [r.public for r in reports]
    for impl in usable:
        keys = [impl.load(r.public) for r in reports]
        triples = [(k, r.data, r.signature) for k, r in zip(keys, reports, strict=True)]
        passes[f"{impl.name}/verify"] = lambda i=impl, t=triples: [i.verify(k, d, s) for k, d, s in t]
        passes[f"{impl.name}/load"] = lambda i=impl: [i.load(p) for p in raws]
        passes[f"{impl.name}/cold"] = lambda i=impl: [i.verify(i.load(r.public), r.data, r.signature)
                                                      for r in reports]
    best = {name: float("inf") for name in passes}
    for _ in range(rounds):
        for name, work in passes.items():
            best[name] = min(best[name], timed(work, n))
    loads, canon = best["loads"], best["canonical"]
    head = [("json.loads of the report texts (the fold's baseline)", f"{loads * 1e6:.1f}",
             f"{1 / loads:,.0f}", "1.00x", "", ""),
            ("signing.canonical of the parsed reports (before any verify)", f"{canon * 1e6:.1f}",
             f"{1 / canon:,.0f}", f"{canon / loads:.2f}x", "", "")]
    for impl in usable:
        verify, load, cold = (best[f"{impl.name}/{k}"] for k in ("verify", "load", "cold"))
        rows.append((impl.name, f"{verify * 1e6:.1f}", f"{1 / verify:,.0f}", f"{verify / loads:.2f}x",
                     f"{load * 1e6:.2f} / {cold * 1e6:.1f}", impl.note))
    return head + sorted(rows, key=lambda r: float(r[1]) if r[1] != "unusable" else float("inf"))


def machine() -> str:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model or platform.processor() or 'unknown CPU'}, Python {platform.python_version()}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports", type=int, default=2000, help="signed reports (default 2000)")
    parser.add_argument("--keys", type=int, default=500, help="VMs (keys) signing them (default 500)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="rounds of every pass in turn; the fastest counts (default 5)")
    args = parser.parse_args()
    reports = make_reports(args.reports, min(args.keys, args.reports))
    impls, missing = implementations()
    rows = measure(reports, impls, args.rounds)
    size = sum(len(r.text) for r in reports) / len(reports)
    print(f"Ed25519 verification of {len(reports):,} signed reports ({size:.0f} bytes each on average) "
          f"from {min(args.keys, args.reports)} VMs, one thread, best of {args.rounds}; {machine()}")
    head = ("implementation", "µs/verify", "verify/s", "vs json.loads", "key load / load+verify µs", "note")
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    for row in [head, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    print("batch verification: none of these bindings offers one (libsodium and OpenSSL have none; "
          "ed25519-zebra's batch API is not in its Python binding)")
    for line in missing:
        print(f"not measured: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
