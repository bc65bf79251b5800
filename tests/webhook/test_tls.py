"""TLS: verification is always on; a private CA is trusted only through ca_file."""

from __future__ import annotations

import subprocess
import sys

from se_forwarder.sinks.base import Delivered, Retry
from tests.support.receiver import make_tls
from tests.support.sinks import make_sink, record_events


def test_a_receiver_with_a_private_ca_is_refused_without_ca_file_in_one_clear_line(tls_receiver,
                                                                                   state_dir):
    sink = make_sink(url=tls_receiver.url)

    [outcome] = sink.deliver(record_events(state_dir, 1)).outcomes

    assert isinstance(outcome, Retry)
    assert outcome.reason.startswith(f"TLS verification failed for {tls_receiver.url}: ")
    assert outcome.reason.endswith("give ca_file (the receiver's CA bundle)")
    assert "\n" not in outcome.reason and "Traceback" not in outcome.reason
    assert tls_receiver.requests == []


def test_check_reports_the_same_tls_line(tls_receiver):
    problem = make_sink(url=tls_receiver.url).check()

    assert problem is not None
    assert problem.startswith("TLS verification failed") and "ca_file" in problem


def test_with_ca_file_the_same_receiver_is_trusted(tls_receiver, tls, state_dir, secret_env):
    events = record_events(state_dir, 3)
    sink = make_sink(url=tls_receiver.url, ca_file=str(tls.ca_cert), secret_env=secret_env)

    assert sink.check() is None
    assert sink.deliver(events).outcomes == [Delivered()] * 3
    assert tls_receiver.accepted_ids() == [e.ce_id for e in events]
    assert tls_receiver.errors == []


def test_a_ca_file_of_another_ca_is_refused_and_says_so(tls_receiver, tmp_path, state_dir):
    other = make_tls(tmp_path / "other")
    sink = make_sink(url=tls_receiver.url, ca_file=str(other.ca_cert))

    [outcome] = sink.deliver(record_events(state_dir, 1)).outcomes

    assert isinstance(outcome, Retry)
    assert "TLS verification failed" in outcome.reason
    assert "ca_file does not hold the CA" in outcome.reason


def test_a_certificate_for_another_host_is_refused(tls, tmp_path, state_dir):
    from tests.support.receiver import Receiver

    wrong = make_tls(tmp_path / "wrong", hosts=("other.example",))
    with Receiver(tls=wrong) as receiver:
        sink = make_sink(url=receiver.url, ca_file=str(wrong.ca_cert))

        [outcome] = sink.deliver(record_events(state_dir, 1)).outcomes

    assert isinstance(outcome, Retry)
    assert "TLS verification failed" in outcome.reason
    assert "127.0.0.1" in outcome.reason.split(": ", 1)[1]  # names the mismatch
    assert receiver.requests == []


def test_se_forwarder_check_prints_one_fail_line_for_the_sink(tls_receiver, tmp_path):
    config = tmp_path / "agent.toml"
    config.write_text(
        f'[imds]\nurl = "http://127.0.0.1:9"\n[state]\ndir = "{tmp_path / "state"}"\n'
        f'[[sinks]]\ntype = "webhook"\nurl = "{tls_receiver.url}"\n'
    )

    result = subprocess.run([sys.executable, "-m", "se_forwarder", "check", "--config", str(config)],
                            capture_output=True, text=True, timeout=60)

    assert result.returncode != 0
    [line] = [ln for ln in result.stdout.splitlines() if "sink" in ln]
    assert line.startswith("FAIL  sink webhook:https://127.0.0.1:")
    assert "TLS verification failed" in line and "give ca_file" in line
    assert "Traceback" not in result.stdout + result.stderr
