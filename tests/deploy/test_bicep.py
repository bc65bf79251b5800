"""bicep/: parses, passes checkov, and grants the agents and the coordinator only the narrow data-plane
roles they need."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

from se_forwarder import config
from se_forwarder.sinks import logs_rows

from .conftest import REPO, tool

EVENT_HUBS_DATA_SENDER = "2b629674-e913-4c01-ae53-ef4638d8f975"
EVENT_HUBS_DATA_RECEIVER = "a638d3c7-ab3a-418d-83e6-5f17a39d4fde"
QUEUE_DATA_MESSAGE_PROCESSOR = "8a0f0c08-91a1-4084-bc3d-661d67233fed"
QUEUE_DATA_MESSAGE_SENDER = "c6a89b2d-59bc-44d0-9896-0f6e12d7b80a"
MONITORING_METRICS_PUBLISHER = "3913510d-42f4-4e42-8a64-420c390055eb"
BLOB_DATA_CONTRIBUTOR = "ba92f5b4-2d11-453d-a403-e96b0029c9fe"
READER = "acdd72a7-3385-48ef-bd42-f606fba81ae7"
SCHEDULED_EVENTS_CONTRIBUTOR = "b67fe603-310e-4889-b9ee-8257d09d353d"  # unconfirmed by Microsoft's pages
RESOURCE_GROUP = "<not a resource>"  # an assignment without scope: the module's resource group
CONTAINER = "Microsoft.Storage/storageAccounts/blobServices/containers"
DCR = "Microsoft.Insights/dataCollectionRules"
HUB = "Microsoft.EventHub/namespaces/eventhubs"
QUEUE = "Microsoft.Storage/storageAccounts/queueServices/queues"
ROLE_ASSIGNMENT = "Microsoft.Authorization/roleAssignments"


def expr(node: Any) -> str:
    """A pycep expression tree as compact Bicep-like text: `identities.outputs.agentIds[i]`."""
    if not isinstance(node, dict):
        return str(node)
    if "operator" in node:
        op = node["operator"]
        operands = list(op["operands"].values())
        if op["type"] == "property_accessor":
            return f"{expr(operands[0])}.{expr(operands[1])}"
        if op["type"] == "index_accessor":
            return f"{expr(operands[0])}[{expr(operands[1])}]"
        if op["type"] == "not":
            return f"!{expr(operands[0])}"
        return f"{op['type']}({', '.join(expr(o) for o in operands)})"
    if "function" in node:
        fn = node["function"]
        args = [expr(a) for a in (fn.get("parameters") or {}).values() if a is not None]
        return f"{fn['type']}({', '.join(args)})"
    return json.dumps(node, sort_keys=True)


def loop(node: dict) -> str | None:
    """`item in array` or `(item, index) in array` for a looped resource, module or output value."""
    loop_type = node.get("loop_type") or node.get("config", {}).get("loop_type")
    if not loop_type:
        return None
    d = loop_type["detail"]
    if "index_name" in d:
        return f"({d['item_name']}, {d['index_name']}) in {d['array_name']}"
    return f"{d['item_name']} in {d['array_name']}"


def module_body(module: dict) -> dict:
    """A module's name/params/scope, inside its loop or condition if it has one."""
    cfg = module["config"]
    return cfg["config"] if "loop_type" in cfg or "condition" in cfg else cfg


def role_assignments(bicep_docs: dict[str, dict]) -> list[dict[str, Any]]:
    """Every role assignment in every file, with its role, scope's type, principal and condition."""
    found = []
    for path, doc in bicep_docs.items():
        for name, res in (doc.get("resources") or {}).items():
            if res["type"] != ROLE_ASSIGNMENT:
                continue
            body = module_body(res)
            role_fn = body["properties"]["roleDefinitionId"]["function"]
            assert role_fn["type"] == "subscription_resource_id", f"{path}:{name}"
            role_var = role_fn["parameters"]["resource_name_1"]
            scope = expr(body.get("scope", "<resource group>"))
            scope_symbol = scope.split("[")[0]
            condition = res["config"].get("condition")
            found.append({
                "where": f"{path}:{name}",
                "role": doc["variables"][role_var]["value"],
                "scope": scope,
                "scope_type": doc["resources"].get(scope_symbol, {}).get("type", "<not a resource>"),
                "principal": expr(body["properties"]["principalId"]),
                "loop": loop(res),
                "condition": expr(condition) if condition else None,
            })
    return found


def test_every_bicep_file_parses_with_pycep(bicep_docs: dict[str, dict]) -> None:
    assert set(bicep_docs) >= {
        "main.bicep", "modules/eventhubs.bicep", "modules/approval-queues.bicep",
        "modules/identities.bicep", "modules/vm-agent.bicep", "modules/logs-table.bicep",
        "modules/logs-ingestion.bicep",
    }
    for path, doc in bicep_docs.items():
        assert "__error__" not in doc, f"{path}: {doc.get('__error__')}"
        assert doc.get("resources") or doc.get("modules"), f"{path} declares nothing"


def test_checkov_finds_no_failed_check_and_every_skip_is_justified() -> None:
    proc = subprocess.run(
        [str(tool("checkov")), "-d", str(REPO / "bicep"), "--framework", "bicep",
         "--output", "json", "--skip-download"],
        capture_output=True, text=True, timeout=180, check=False,
        env={**os.environ, "BC_SKIP_MAPPING": "TRUE"},
    )
    report = json.loads(proc.stdout)
    summary = report["summary"]
    failed = [(c["check_id"], c["resource"]) for c in report["results"].get("failed_checks", [])]
    assert summary["failed"] == 0, failed
    assert summary["parsing_errors"] == 0
    assert summary["passed"] > 0
    for check in report["results"].get("skipped_checks", []):
        reason = check["check_result"].get("suppress_comment", "")
        assert len(reason) >= 40 and reason != "No comment provided", (check["check_id"], reason)


def test_each_agent_may_only_send_to_the_hub_process_its_own_queue_and_publish_logs(
    bicep_docs: dict[str, dict],
) -> None:
    agent = [a for a in role_assignments(bicep_docs)
             if a["principal"] in ("principalId", "processorPrincipalIds[i]")]
    assert sorted((a["role"], a["scope_type"], a["scope"], a["loop"], a["condition"]) for a in agent) == [
        # one per agent identity, on the hub itself (not the namespace)
        (EVENT_HUBS_DATA_SENDER, HUB, "hub", "principalId in senderPrincipalIds", None),
        # one per agent identity, on the data collection rule itself (Logs ingestion)
        (MONITORING_METRICS_PUBLISHER, DCR, "dcr", "principalId in publisherPrincipalIds", None),
        # the i-th identity on the i-th queue only (not the account)
        (QUEUE_DATA_MESSAGE_PROCESSOR, QUEUE, "queues[i]", "(name, i) in queueNames", None),
    ]


def test_coordinator_may_only_use_the_hub_send_to_the_queues_and_keep_its_container(
    bicep_docs: dict[str, dict],
) -> None:
    coordinator = [a for a in role_assignments(bicep_docs)
                   if a["principal"] in ("receiverPrincipalId", "senderPrincipalId")]
    assert sorted((a["role"], a["scope_type"], a["scope"], a["condition"]) for a in coordinator) == [
        # reads the agents' events and publishes its decisions, on the hub itself
        (EVENT_HUBS_DATA_SENDER, HUB, "hub", "!empty(receiverPrincipalId)"),
        (EVENT_HUBS_DATA_RECEIVER, HUB, "hub", "!empty(receiverPrincipalId)"),
        # its leader lease and snapshots, in its own container (not the account)
        (BLOB_DATA_CONTRIBUTOR, CONTAINER, "coordinatorContainer", "!empty(senderPrincipalId)"),
        (QUEUE_DATA_MESSAGE_SENDER, QUEUE, "queues[i]", "!empty(senderPrincipalId)"),
    ]


def test_no_other_role_assignment_exists(bicep_docs: dict[str, dict]) -> None:
    assignments = role_assignments(bicep_docs)
    assert len(assignments) == 11, [a["where"] for a in assignments]
    assert {a["scope_type"] for a in assignments} == {HUB, QUEUE, DCR, CONTAINER, RESOURCE_GROUP}


def test_only_event_grid_may_send_to_the_azure_feed_hub_and_the_coordinator_only_reads_it(
    bicep_docs: dict[str, dict],
) -> None:
    feed = [a for a in role_assignments(bicep_docs) if a["where"].startswith("modules/azure-feed.bicep:")]
    assert sorted((a["role"], a["scope_type"], a["scope"], a["principal"], a["condition"]) for a in feed) == [
        (EVENT_HUBS_DATA_SENDER, HUB, "feedHub", "topic.identity.principalId", None),
        (EVENT_HUBS_DATA_RECEIVER, HUB, "feedHub", "coordinatorPrincipalId", None),
    ]
    # no agent identity has any right on the feed hub: theirs are on the agents' hub only
    agents = [a for a in role_assignments(bicep_docs) if "senderPrincipalIds" in (a["loop"] or "")]
    assert {a["scope"] for a in agents} == {"hub"} and all(a["where"].startswith("modules/eventhubs.bicep:")
                                                          for a in agents)


def test_the_coordinator_reads_the_vms_resource_group_and_acknowledges_only_when_asked(
    bicep_docs: dict[str, dict],
) -> None:
    roles = [a for a in role_assignments(bicep_docs)
             if a["where"].startswith("modules/coordinator-azure-roles.bicep:")]
    assert sorted((a["role"], a["scope_type"], a["principal"], a["condition"] or "") for a in roles) == [
        (READER, RESOURCE_GROUP, "coordinatorPrincipalId", ""),
        (SCHEDULED_EVENTS_CONTRIBUTOR, RESOURCE_GROUP, "coordinatorPrincipalId", "acknowledge"),
    ]
    main = bicep_docs["main.bicep"]
    assert main["parameters"]["deployAzureFeed"]["default"] is False
    assert main["parameters"]["azureFeedAcknowledge"]["default"] is False
    module = main["modules"]["coordinatorAzureRoles"]
    assert expr(module["config"]["condition"]) == "and(deployAzureFeed, deployCoordinator)"
    body = module_body(module)
    assert expr(body["scope"]) == "resource_group(vmResourceGroupName)"
    assert {k: expr(v) for k, v in body["params"].items()} == {
        "coordinatorPrincipalId": "identities.outputs.coordinatorPrincipalId",
        "acknowledge": "azureFeedAcknowledge"}


def test_event_grid_delivers_every_scheduled_event_emitted_as_a_cloudevent_with_its_own_identity(
    bicep_docs: dict[str, dict],
) -> None:
    feed = bicep_docs["modules/azure-feed.bicep"]
    topic = feed["resources"]["topic"]["config"]
    assert (topic["location"], topic["identity"]["type"]) == ("global", "SystemAssigned")
    assert (expr(topic["properties"]["source"]), topic["properties"]["topicType"]) == (
        "subscription()", "topicType")  # pycep's text of subscription().id
    assert feed["variables"]["topicType"]["value"] == "Microsoft.ResourceNotifications.MaintenanceResources"
    delivery = feed["resources"]["delivery"]["config"]
    props = delivery["properties"]
    assert props["eventDeliverySchema"] == "CloudEventSchemaV1_0"
    assert props["deliveryWithResourceIdentity"]["identity"] == {"type": "SystemAssigned"}
    destination = props["deliveryWithResourceIdentity"]["destination"]
    assert destination["endpointType"] == "EventHub"
    assert expr(destination["properties"]["resourceId"]) == "feedHub.id"
    assert props["filter"]["includedEventTypes"] == ["${topicType}.ScheduledEventEmitted"]
    assert delivery["dependsOn"] == ["topicSends"]  # its right to send exists before it is checked


def test_vms_and_scale_sets_opt_in_to_event_grid_and_resource_graph(bicep_docs: dict[str, dict]) -> None:
    module = bicep_docs["modules/scheduled-events-policy.bicep"]
    policy = module["variables"]["policy"]["value"]["function"]["parameters"]["arg_1"]
    assert policy == {"scheduledEventsAdditionalPublishingTargets": {
        "eventGridAndResourceGraph": {"enable": True, "scheduledEventsApiVersion": "2020-07-01"}}}
    for name, kind in (("vms", "Microsoft.Compute/virtualMachines"),
                       ("sets", "Microsoft.Compute/virtualMachineScaleSets")):
        resource = module["resources"][name]
        assert resource["type"] == kind
        assert module_body(resource)["properties"] == {"scheduledEventsPolicy": "policy"}
    main = bicep_docs["main.bicep"]["modules"]["scheduledEventsPolicy"]
    assert expr(module_body(main)["scope"]) == "resource_group(vmResourceGroupName)"


def test_main_gives_each_vm_its_own_identity_and_queue(bicep_docs: dict[str, dict]) -> None:
    main = bicep_docs["main.bicep"]["modules"]
    params = {name: {k: expr(v) for k, v in module_body(m)["params"].items()}
              for name, m in main.items()}
    # the principals the role modules grant to are the per-VM agent identities, in vmNames order
    assert params["eventHubs"]["senderPrincipalIds"] == "identities.outputs.agentPrincipalIds"
    assert params["approvalQueues"]["processorPrincipalIds"] == "identities.outputs.agentPrincipalIds"
    assert params["approvalQueues"]["queueNames"] == "queueNames"
    # VM i gets identity i and queue i
    assert loop(main["agents"]) == "(vm, i) in vmNames"
    assert params["agents"]["agentIdentityId"] == "identities.outputs.agentIds[i]"
    assert params["agents"]["agentClientId"] == "identities.outputs.agentClientIds[i]"
    assert params["agents"]["queueName"] == "queueNames[i]"
    identities = bicep_docs["modules/identities.bicep"]
    assert loop(identities["resources"]["agent"]) == "vm in vmNames"
    for output in ("agentIds", "agentPrincipalIds", "agentClientIds"):
        value = identities["outputs"][output]["value"]
        assert loop(value) == "(vm, i) in vmNames"
        assert expr(value["config"]).startswith("agent[i].")


def test_outputs_give_the_coordinator_the_hub_and_the_queue_urls(bicep_docs: dict[str, dict]) -> None:
    outputs = bicep_docs["main.bicep"]["outputs"]
    assert {"eventHubsNamespace", "eventHubName", "dashboardsConsumerGroup", "approvalQueues",
            "coordinatorClientId", "coordinatorStorage"} <= set(outputs)
    for name, output in outputs.items():
        described = [d for d in output["decorators"] if d["type"] == "description"]
        assert described, f"output {name} has no @description"


def test_every_parameter_of_main_is_documented(bicep_docs: dict[str, dict]) -> None:
    for name, param in bicep_docs["main.bicep"]["parameters"].items():
        assert any(d["type"] == "description" for d in param["decorators"]), name


def test_agent_config_template_renders_a_valid_config_for_linux_and_windows(tmp_path) -> None:
    template = (REPO / "bicep/agent-config.toml").read_text()
    values = {
        "VM_NAME": "vm-a", "EVENTHUBS_NAMESPACE": "sefwd-eh-x.servicebus.windows.net",
        "EVENTHUB": "scheduled-events", "DRY_RUN": "false",
        "QUEUE_ACCOUNT_URL": "https://sefwdx.queue.core.windows.net", "QUEUE": "se-approvals-vm-a",
        "CLIENT_ID": "00000000-0000-0000-0000-000000000001",
    }
    for state_dir in ("/var/lib/se-forwarder", "C:/ProgramData/se-forwarder/state"):
        text = template.replace("@@STATE_DIR@@", state_dir)
        for key, value in values.items():
            text = text.replace(f"@@{key}@@", value)
        assert "@@" not in text
        path = tmp_path / "config.toml"
        path.write_text(text)
        settings = config.load(path, env={})
        (sink,) = settings.sinks
        assert sink.type == "eventhubs"
        assert sink.options["client_id"] == values["CLIENT_ID"]  # the VM's own identity
        assert sink.heartbeat_interval == 60  # the coordinator's sign of life from every VM
        assert settings.approvals.queue is not None
        assert settings.approvals.queue["queue"] == "se-approvals-vm-a"
        assert settings.approvals.queue["client_id"] == values["CLIENT_ID"]
        assert str(settings.state.dir).replace("\\", "/") == state_dir


def test_logs_are_off_by_default_and_publish_rights_go_to_the_agent_identities(
    bicep_docs: dict[str, dict],
) -> None:
    main = bicep_docs["main.bicep"]
    assert main["parameters"]["deployLogsIngestion"]["default"] is False
    for name in ("logsTable", "logsIngestion"):
        assert main["modules"][name]["config"]["condition"] == "deployLogsIngestion"
    params = {k: expr(v) for k, v in module_body(main["modules"]["logsIngestion"])["params"].items()}
    assert params["publisherPrincipalIds"] == "identities.outputs.agentPrincipalIds"
    assert params["columns"] == "logsColumns"
    agent = {k: expr(v) for k, v in module_body(main["modules"]["agents"])["params"].items()}
    assert agent["logsRuleId"] == "conditional(deployLogsIngestion, logsIngestion.outputs.ruleImmutableId, )"


def test_table_stream_and_agent_rows_share_one_schema(bicep_docs: dict[str, dict]) -> None:
    columns = json.loads((REPO / "bicep/logs-columns.json").read_text())
    assert [(c["name"], c["type"]) for c in columns] == list(logs_rows.COLUMNS)
    main = bicep_docs["main.bicep"]
    loaded = main["variables"]["logsColumns"]["value"]["function"]
    assert (loaded["type"], loaded["parameters"]["file_path"]) == ("load_json_content", "logs-columns.json")
    assert expr(module_body(main["modules"]["logsTable"])["params"]["columns"]) == "logsColumns"
    table = bicep_docs["modules/logs-table.bicep"]
    assert table["parameters"]["tableName"]["default"] == logs_rows.TABLE
    assert table["resources"]["table"]["config"]["properties"]["schema"]["columns"] == "columns"
    ingestion = bicep_docs["modules/logs-ingestion.bicep"]
    assert ingestion["parameters"]["streamName"]["default"] == logs_rows.STREAM
    rule = ingestion["resources"]["dcr"]["config"]["properties"]
    assert rule["streamDeclarations"] == {"'${streamName}'": {"columns": "columns"}}
    [flow] = rule["dataFlows"]
    assert (flow["streams"], flow["transformKql"], flow["outputStream"]) == \
        (["streamName"], "source", "Custom-${tableName}")


def test_agent_config_with_logs_renders_a_valid_logs_ingestion_sink(tmp_path) -> None:
    template = ((REPO / "bicep/agent-config.toml").read_text()
                + (REPO / "bicep/agent-config-logs.toml").read_text())
    values = {
        "VM_NAME": "vm-a", "EVENTHUBS_NAMESPACE": "sefwd-eh-x.servicebus.windows.net",
        "EVENTHUB": "scheduled-events", "DRY_RUN": "false", "STATE_DIR": "/var/lib/se-forwarder",
        "QUEUE_ACCOUNT_URL": "https://sefwdx.queue.core.windows.net", "QUEUE": "se-approvals-vm-a",
        "CLIENT_ID": "00000000-0000-0000-0000-000000000001",
        "LOGS_ENDPOINT": "https://sefwd-dce-x-a1b2.westeurope-1.ingest.monitor.azure.com",
        "LOGS_RULE_ID": "dcr-0123456789abcdef0123456789abcdef", "LOGS_STREAM": logs_rows.STREAM,
    }
    for key, value in values.items():
        template = template.replace(f"@@{key}@@", value)
    assert "@@" not in template
    path = tmp_path / "config.toml"
    path.write_text(template)
    hub, logs = config.load(path, env={}).sinks
    assert (hub.type, logs.type) == ("eventhubs", "logs-ingestion")
    assert logs.options["client_id"] == values["CLIENT_ID"]  # the VM's own identity
    assert logs.options["rule_id"] == values["LOGS_RULE_ID"]
    assert logs.options["stream"] == "Custom-SeForwarderEvents"
