"""OTLP/HTTP: a local receiver gets metric and trace exports, and they decode."""

from __future__ import annotations

from datetime import datetime

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.support.agent import AgentProcess, read_jsonl
from tests.support.config import write_config
from tests.support.endpoint import HttpEndpoint
from tests.support.waiting import wait_for

FAST_EXPORT = {"OTEL_METRIC_EXPORT_INTERVAL": "300", "OTEL_BSP_SCHEDULE_DELAY": "100"}


def attrs(kvs) -> dict:
    return {kv.key: kv.value.string_value or kv.value.int_value for kv in kvs}


def spans(collector: HttpEndpoint) -> list:
    out = []
    for post in collector.posts("/v1/traces"):
        request = ExportTraceServiceRequest.FromString(post.body)
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                out += list(ss.spans)
    return out


def metric_points(collector: HttpEndpoint) -> dict:
    """The latest export's metrics: {name: (unit, [(attributes, point)])}."""
    posts = collector.posts("/v1/metrics")
    if not posts:
        return {}
    request = ExportMetricsServiceRequest.FromString(posts[-1].body)
    out = {}
    for rm in request.resource_metrics:
        assert attrs(rm.resource.attributes)["service.name"] == "se-forwarder"
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                data = getattr(m, m.WhichOneof("data"))
                out[m.name] = (m.unit, [(attrs(p.attributes), p) for p in data.data_points])
    return out


def test_metrics_and_traces_reach_an_otlp_receiver_and_decode(simulator, control, agents, tmp_path):
    out = tmp_path / "out.jsonl"
    sink = f"file:{out}"
    with HttpEndpoint(200) as collector:
        cfg = write_config(tmp_path / "agent.toml", sinks=[{"type": "file", "path": str(out)}],
                           imds={"url": simulator.url, "poll_interval": 0.1},
                           state={"dir": str(tmp_path / "state")},
                           telemetry={"otlp_endpoint": collector.url})
        agent = AgentProcess(["--config", str(cfg)], env=FAST_EXPORT,
                             log_path=tmp_path / "agent.log").start()
        agents.append(agent)
        event_id = control.add(EventType="Reboot")["EventId"]
        wait_for(lambda: read_jsonl(out), what="delivery")

        def delivered_count():
            _unit, points = metric_points(collector).get("se_forwarder.deliveries", ("", []))
            return sum(p.as_int for a, p in points if a == {"sink": sink, "outcome": "delivered"})

        wait_for(lambda: delivered_count() == 1, what="deliveries exported")
        wait_for(lambda: {s.name for s in spans(collector)} == {"transition", "deliver"},
                 what="both spans exported")
        assert agent.terminate() == 0

    metrics = metric_points(collector)
    unit, latency = metrics["se_forwarder.delivery.latency"]
    assert unit == "s" and [p.count for a, p in latency if a == {"sink": sink}] == [1]
    assert [(a, p.as_int) for a, p in metrics["se_forwarder.transitions"][1] if p.as_int] == [
        ({"type": "scheduled"}, 1)]
    root, deliver = sorted(spans(collector), key=lambda s: s.name != "transition")
    observed = datetime.fromisoformat(read_jsonl(out)[0]["time"]).timestamp()
    assert abs(root.start_time_unix_nano / 1e9 - observed) < 0.001
    assert attrs(root.attributes)["se_forwarder.event_id"] == event_id
    assert attrs(root.attributes)["cloudevents.event_id"] == f"{event_id}/scheduled"
    assert deliver.trace_id == root.trace_id and deliver.parent_span_id == root.span_id
    assert deliver.start_time_unix_nano == root.start_time_unix_nano
    assert deliver.end_time_unix_nano >= root.end_time_unix_nano
    assert attrs(deliver.attributes)["se_forwarder.sink"] == sink
