"""bicep/: parses, passes checkov, and grants the agents and the coordinator only the narrow data-plane
roles they need."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

from se_forwarder import config
from se_forwarder.sinks import logs_rows

from .bicep_tree import expr, loop, module_body
from .conftest import REPO, tool

EVENT_HUBS_DATA_SENDER = "2b629674-e913-4c01-ae53-ef4638d8f975"
KEY_VAULT_SECRETS_USER = "4633458b-17de-408a-b874-0445c86b69e6"
QUEUE_DATA_CONTRIBUTOR = "974c5e8b-45b9-4653-ba55-5f855dd0fb88"
ACCOUNT = "Microsoft.Storage/storageAccounts"
VAULT = "Microsoft.KeyVault/vaults"
EVENT_HUBS_DATA_RECEIVER = "a638d3c7-ab3a-418d-83e6-5f17a39d4fde"
QUEUE_DATA_MESSAGE_PROCESSOR = "8a0f0c08-91a1-4084-bc3d-661d67233fed"
QUEUE_DATA_MESSAGE_SENDER = "c6a89b2d-59bc-44d0-9896-0f6e12d7b80a"
MONITORING_METRICS_PUBLISHER = "3913510d-42f4-4e42-8a64-420c390055eb"
BLOB_DATA_CONTRIBUTOR = "ba92f5b4-2d11-453d-a403-e96b0029c9fe"
CUSTOM_READER = "custom:readerRoleId"
SCHEDULED_EVENTS_CONTRIBUTOR = "b67fe603-310e-4889-b9ee-8257d09d353d"  # unconfirmed by Microsoft's pages
RESOURCE_GROUP = "<not a resource>"  # an assignment without scope: the module's resource group
CONTAINER = "Microsoft.Storage/storageAccounts/blobServices/containers"
DCR = "Microsoft.Insights/dataCollectionRules"
HUB = "Microsoft.EventHub/namespaces/eventhubs"
QUEUE = "Microsoft.Storage/storageAccounts/queueServices/queues"
ROLE_ASSIGNMENT = "Microsoft.Authorization/roleAssignments"


def role_assignments(bicep_docs: dict[str, dict]) -> list[dict[str, Any]]:
    """Every role assignment in every file, with its role, scope's type, principal and condition."""
    found = []
    for path, doc in bicep_docs.items():
        for name, res in (doc.get("resources") or {}).items():
            if res["type"] != ROLE_ASSIGNMENT:
                continue
            body = module_body(res)
            role_id = body["properties"]["roleDefinitionId"]
            if isinstance(role_id, str):  # a custom role's ID, handed in as a parameter
                role = f"custom:{role_id}"
            else:
                role_fn = role_id["function"]
                assert role_fn["type"] == "subscription_resource_id", f"{path}:{name}"
                role = doc["variables"][role_fn["parameters"]["resource_name_1"]]["value"]
            scope = expr(body.get("scope", "<resource group>"))
            scope_symbol = scope.split("[")[0]
            condition = res["config"].get("condition")
            found.append({
                "where": f"{path}:{name}",
                "role": role,
                "scope": scope,
                "scope_type": doc["resources"].get(scope_symbol, {}).get("type", "<not a resource>"),
                "principal": expr(body["properties"]["principalId"]),
                "loop": loop(res),
                "condition": expr(condition) if condition else None,
            })
    return found


def test_every_bicep_file_parses_with_pycep(bicep_docs: dict[str, dict]) -> None:
    assert set(bicep_docs) >= {
        "main.bicep", "hub.bicep", "agents.bicep", "modules/agent-batch.bicep",
        "modules/eventhubs.bicep", "modules/approval-queues.bicep", "modules/vm-hub-access.bicep",
        "modules/vm-agent.bicep", "modules/logs-table.bicep", "modules/logs-ingestion.bicep",
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
    agent = [a for a in role_assignments(bicep_docs) if a["principal"] == "agentPrincipalId"
             and not a["where"].startswith("modules/scale-set")]  # a scale set's: the test below
    assert {a["where"].split(":")[0] for a in agent} == {"modules/vm-hub-access.bicep"}  # one VM each
    assert sorted((a["role"], a["scope_type"], a["scope"], a["loop"], a["condition"]) for a in agent) == [
        # on the hub itself (not the namespace)
        (EVENT_HUBS_DATA_SENDER, HUB, "hub", None, None),
        # on the data collection rule itself (Logs ingestion)
        (MONITORING_METRICS_PUBLISHER, DCR, "dcr", None, "!empty(dataCollectionRuleName)"),
        # on its own queue only (not the account)
        (QUEUE_DATA_MESSAGE_PROCESSOR, QUEUE, "queue", None, None),
    ]


def test_coordinator_may_only_use_the_hub_send_to_the_queues_keep_its_container_and_read_its_key(
    bicep_docs: dict[str, dict],
) -> None:
    coordinator = [a for a in role_assignments(bicep_docs)
                   if (a["principal"] in ("receiverPrincipalId", "senderPrincipalId")
                       or (a["principal"] == "coordinatorPrincipalId" and "keyvault" in a["where"]))
                   and not a["where"].startswith("modules/scale-set")]  # a scale set's: the test below
    assert sorted((a["role"], a["scope_type"], a["scope"], a["condition"]) for a in coordinator) == [
        # reads the agents' events and publishes its decisions, on the hub itself
        (EVENT_HUBS_DATA_SENDER, HUB, "hub", "!empty(receiverPrincipalId)"),
        # its signing key: secrets of its own vault only
        (KEY_VAULT_SECRETS_USER, VAULT, "vault", None),
        (EVENT_HUBS_DATA_RECEIVER, HUB, "hub", "!empty(receiverPrincipalId)"),
        # its leader lease and snapshots, in its own container (not the account)
        (BLOB_DATA_CONTRIBUTOR, CONTAINER, "coordinatorContainer", "!empty(senderPrincipalId)"),
        # each VM's queue, one by one
        (QUEUE_DATA_MESSAGE_SENDER, QUEUE, "queue", "!empty(senderPrincipalId)"),
    ]


def test_no_other_role_assignment_exists(bicep_docs: dict[str, dict]) -> None:
    assignments = role_assignments(bicep_docs)
    assert len(assignments) == 15, [a["where"] for a in assignments]
    scopes = {a["scope_type"] for a in assignments}
    assert scopes == {HUB, QUEUE, DCR, CONTAINER, VAULT, RESOURCE_GROUP, ACCOUNT}
    assert all(a["loop"] is None for a in assignments)  # per VM only through a module per VM
    # account-wide rights only for autoscaled scale sets, whose instances make their own queues
    assert {a["where"] for a in assignments if a["scope_type"] == ACCOUNT} == {
        "modules/scale-set-hub-access.bicep:setQueues", "modules/scale-set-hub-access.bicep:coordinatorSends"}


def test_an_autoscaled_scale_set_gets_one_identity_whose_instances_make_their_own_queues(
        bicep_docs: dict[str, dict]) -> None:
    access = [a for a in role_assignments(bicep_docs)
              if a["where"].startswith("modules/scale-set-hub-access")]
    assert sorted((a["role"], a["scope_type"], a["principal"]) for a in access) == [
        (EVENT_HUBS_DATA_SENDER, HUB, "agentPrincipalId"),
        (QUEUE_DATA_CONTRIBUTOR, ACCOUNT, "agentPrincipalId"),  # queues/write: make its own queue
        (QUEUE_DATA_MESSAGE_SENDER, ACCOUNT, "senderPrincipalId"),
    ]
    agents = bicep_docs["agents.bicep"]["modules"]
    assert loop(agents["setIdentities"]) == "set in scaleSets"
    assert loop(agents["setAccess"]) == "(set, i) in scaleSets"


def test_only_event_grid_may_send_to_the_azure_feed_hub_and_the_coordinator_only_reads_it(
    bicep_docs: dict[str, dict],
) -> None:
    feed = [a for a in role_assignments(bicep_docs) if a["where"].startswith("modules/azure-feed")]
    assert sorted((a["role"], a["scope_type"], a["scope"], a["principal"], a["condition"]) for a in feed) == [
        (EVENT_HUBS_DATA_SENDER, HUB, "feedHub", "topicPrincipalId", None),
        (EVENT_HUBS_DATA_RECEIVER, HUB, "feedHub", "coordinatorPrincipalId", None),
    ]
    # the topic's assignment is named with its principal: a topic made again gets a new identity,
    # and a new assignment instead of a clash with the old one's name
    sender = bicep_docs["modules/azure-feed-sender.bicep"]["resources"]["topicSends"]["config"]
    assert expr(sender["name"]) == "guid(feedHub.id, topicPrincipalId, eventHubsDataSender)"
    # no agent identity has any right on the feed hub: theirs are on the agents' hub only
    access = bicep_docs["modules/vm-hub-access.bicep"]["resources"]
    assert expr(access["hub"]["config"]["name"]) == "eventHubName"


def test_the_coordinator_reads_only_vms_and_their_events_and_acknowledges_only_when_asked(
    bicep_docs: dict[str, dict],
) -> None:
    roles = [a for a in role_assignments(bicep_docs)
             if a["where"].startswith("modules/coordinator-azure-roles.bicep:")]
    assert sorted((a["role"], a["scope_type"], a["principal"], a["condition"] or "") for a in roles) == [
        (SCHEDULED_EVENTS_CONTRIBUTOR, RESOURCE_GROUP, "coordinatorPrincipalId", "acknowledge"),
        (CUSTOM_READER, RESOURCE_GROUP, "coordinatorPrincipalId", ""),
    ]
    role = bicep_docs["modules/coordinator-reader-role.bicep"]["resources"]["role"]["config"]["properties"]
    (permissions,) = role["permissions"]
    assert all(a.endswith("/read") for a in permissions["actions"])  # reads only, and not */read
    assert {a.split("/")[0] for a in permissions["actions"]} == {
        "Microsoft.Compute", "Microsoft.Maintenance", "Microsoft.Resources"}
    assert permissions["dataActions"] == []
    agents = bicep_docs["agents.bicep"]
    assert agents["parameters"]["azureFeedAcknowledge"]["default"] is False
    assert agents["parameters"]["coordinatorResourceGroups"]["default"] == []
    module = agents["modules"]["coordinatorRoles"]
    assert loop(module) == "rg in coordinatorResourceGroups"
    assert expr(module_body(module)["scope"]) == "resource_group(rg)"


def test_event_grid_delivers_every_scheduled_event_emitted_as_a_cloudevent_with_its_own_identity(
    bicep_docs: dict[str, dict],
) -> None:
    feed = bicep_docs["modules/azure-feed-topic.bicep"]
    topic = feed["resources"]["topic"]["config"]
    assert (topic["location"], topic["identity"]["type"]) == ("global", "SystemAssigned")
    assert (expr(topic["properties"]["source"]), topic["properties"]["topicType"]) == (
        "subscription()", "topicType")  # pycep's text of subscription().id: the VMs' subscription
    assert feed["variables"]["topicType"]["value"] == "Microsoft.ResourceNotifications.MaintenanceResources"
    delivery = feed["resources"]["delivery"]["config"]
    props = delivery["properties"]
    assert props["eventDeliverySchema"] == "CloudEventSchemaV1_0"
    assert props["deliveryWithResourceIdentity"]["identity"] == {"type": "SystemAssigned"}
    destination = props["deliveryWithResourceIdentity"]["destination"]
    assert destination["endpointType"] == "EventHub"
    assert expr(destination["properties"]["resourceId"]) == "feedHubId"
    assert props["filter"]["includedEventTypes"] == ["${topicType}.ScheduledEventEmitted"]
    assert delivery["dependsOn"] == ["topicSends"]  # its right to send exists before it is checked
    sends = module_body(feed["modules"]["topicSends"])
    assert expr(sends["params"]["topicPrincipalId"]) == "topic.identity.principalId"


def test_event_grid_delivers_each_vms_availability_change_to_the_same_feed_hub_with_its_own_identity(
    bicep_docs: dict[str, dict],
) -> None:
    feed = bicep_docs["modules/azure-feed-topic.bicep"]
    topic = feed["resources"]["healthTopic"]["config"]
    assert (topic["location"], topic["identity"]["type"]) == ("global", "SystemAssigned")
    assert feed["variables"]["healthTopicType"]["value"] == "Microsoft.ResourceNotifications.HealthResources"
    props = feed["resources"]["healthDelivery"]["config"]["properties"]
    assert props["eventDeliverySchema"] == "CloudEventSchemaV1_0"
    destination = props["deliveryWithResourceIdentity"]["destination"]
    assert expr(destination["properties"]["resourceId"]) == "feedHubId"
    assert props["filter"]["includedEventTypes"] == ["${healthTopicType}.AvailabilityStatusChanged"]
    assert feed["resources"]["healthDelivery"]["config"]["dependsOn"] == ["healthSends"]
    sends = module_body(feed["modules"]["healthSends"])
    assert expr(sends["params"]["topicPrincipalId"]) == "healthTopic.identity.principalId"


def test_vms_and_scale_sets_opt_in_with_the_api_version_that_has_the_properties(
        bicep_docs: dict[str, dict]) -> None:
    module = bicep_docs["modules/scheduled-events-policy.bicep"]
    policy = module["variables"]["policy"]["value"]["function"]["parameters"]["arg_1"]
    assert policy == {
        "scheduledEventsAdditionalPublishingTargets": {
            "eventGridAndResourceGraph": {"enable": True, "scheduledEventsApiVersion": "2020-07-01"}},
        "allInstancesDown": {"automaticallyApprove": "allInstancesDownAutoApprove"}}
    assert module["parameters"]["allInstancesDownAutoApprove"]["default"] is True  # Azure's own default
    for name, kind in (("vms", "Microsoft.Compute/virtualMachines"),
                       ("sets", "Microsoft.Compute/virtualMachineScaleSets")):
        resource = module["resources"][name]
        assert resource["type"] == kind
        # scheduledEventsApiVersion and allInstancesDown arrived with Compute 2025-04-01
        assert resource["api_version"] >= "2025-04-01"
        assert module_body(resource)["properties"] == {"scheduledEventsPolicy": "policy"}
    agents = bicep_docs["agents.bicep"]["modules"]["scheduledEventsPolicy"]
    assert expr(module_body(agents)["scope"]) == "resource_group(target.resourceGroup)"


def test_each_vm_gets_its_own_identity_in_its_own_resource_group_and_its_own_queue(
        bicep_docs: dict[str, dict]) -> None:
    batch = bicep_docs["modules/agent-batch.bicep"]["modules"]
    assert loop(batch["agents"]) == "vm in vms"
    assert expr(module_body(batch["agents"])["scope"]) == "resource_group(vm.resourceGroup)"
    assert loop(batch["access"]) == "(vm, i) in vms"
    access = {k: expr(v) for k, v in module_body(batch["access"])["params"].items()}
    assert access["vmId"] == "agents[i].outputs.vmId"  # VM i's queue, from VM i's vmId
    assert access["agentPrincipalId"] == "agents[i].outputs.principalId"  # for VM i's identity
    agent = bicep_docs["modules/vm-agent.bicep"]["resources"]
    assert agent["agent"]["type"] == "Microsoft.ManagedIdentity/userAssignedIdentities"
    assert loop(agent["agent"]) is None  # one identity per deployment of vm-agent.bicep: one per VM


def test_outputs_give_the_coordinator_the_hub_and_the_queues(bicep_docs: dict[str, dict]) -> None:
    outputs = bicep_docs["main.bicep"]["outputs"]
    assert {"eventHubsNamespace", "eventHubName", "dashboardsConsumerGroup", "coordinatorConsumerGroup",
            "agents", "coordinatorClientId", "coordinatorStorage", "keyVaultUri"} <= set(outputs)
    for path in ("main.bicep", "hub.bicep", "agents.bicep"):
        for name, output in bicep_docs[path]["outputs"].items():
            described = [d for d in output["decorators"] if d["type"] == "description"]
            assert described, f"{path}: output {name} has no @description"


def test_every_parameter_of_the_entry_templates_is_documented(bicep_docs: dict[str, dict]) -> None:
    for path in ("main.bicep", "hub.bicep", "agents.bicep"):
        for name, param in bicep_docs[path]["parameters"].items():
            assert any(d["type"] == "description" for d in param["decorators"]), f"{path}: {name}"


def test_public_access_and_private_endpoints_are_parameters_of_every_shared_resource(
        bicep_docs: dict[str, dict]) -> None:
    hub = bicep_docs["hub.bicep"]
    assert hub["parameters"]["publicNetworkAccess"]["default"] == "Enabled"
    for module in ("eventHubs", "approvalQueues", "keyVault"):
        params = {k: expr(v) for k, v in module_body(hub["modules"][module])["params"].items()}
        assert params["publicNetworkAccess"] == "publicNetworkAccess", module
        assert params["privateEndpointSubnetId"] == "privateEndpointSubnetId", module
    namespace = bicep_docs["modules/eventhubs.bicep"]["resources"]
    assert namespace["namespace"]["config"]["properties"]["publicNetworkAccess"] == "publicNetworkAccess"
    assert namespace["networkRules"]["config"]["properties"]["publicNetworkAccess"] == "publicNetworkAccess"
    account = bicep_docs["modules/approval-queues.bicep"]["resources"]["account"]["config"]
    assert account["properties"]["publicNetworkAccess"] == "publicNetworkAccess"
    endpoint = bicep_docs["modules/private-endpoint.bicep"]["resources"]["endpoint"]
    assert endpoint["type"] == "Microsoft.Network/privateEndpoints"


def test_the_coordinators_snapshots_are_versioned_and_the_hub_keeps_a_week(
        bicep_docs: dict[str, dict]) -> None:
    blob = bicep_docs["modules/approval-queues.bicep"]["resources"]["blobService"]["config"]["config"]
    assert blob["properties"]["isVersioningEnabled"] is True
    assert blob["properties"]["deleteRetentionPolicy"] == {"enabled": True, "days": "stateRetentionDays"}
    for path in ("hub.bicep", "main.bicep"):
        assert bicep_docs[path]["parameters"]["eventHubRetentionDays"]["default"] == 7


def test_under_a_coordinator_the_agents_leave_approvals_to_it_and_send_their_tags(
        bicep_docs: dict[str, dict]) -> None:
    main = bicep_docs["main.bicep"]["parameters"]
    assert expr(main["coordinatorOnly"]["default"]) == "deployCoordinator"
    agents = bicep_docs["agents.bicep"]["parameters"]
    assert expr(agents["coordinatorOnly"]["default"]) == "!empty(hub.coordinatorPrincipalId)"
    template = (REPO / "bicep/agent-config.toml").read_text()
    assert "coordinator_only = @@COORDINATOR_ONLY@@" in template and "tags = @@TAG_NAMES@@" in template


def test_a_new_verify_key_re_runs_the_installer_on_every_vm(bicep_docs: dict[str, dict]) -> None:
    variables = bicep_docs["modules/vm-agent.bicep"]["variables"]
    tag = variables["updateTag"]["value"]["function"]
    assert tag["type"] == "unique_string"
    assert "approvalVerifyKeys" in tag["parameters"].values()
    assert {"config", "releaseSums", "wheelFile"} <= set(tag["parameters"].values())
    for name in ("linuxInstaller", "windowsInstaller"):
        resource = bicep_docs["modules/vm-agent.bicep"]["resources"][name]
        assert module_body(resource)["properties"]["forceUpdateTag"] == "updateTag"


AGENT_VALUES = {
    "VM_NAME": "vm-a", "EVENTHUBS_NAMESPACE": "sefwd-eh-x.servicebus.windows.net",
    "EVENTHUB": "scheduled-events", "DRY_RUN": "false", "COORDINATOR_ONLY": "true",
    "TAG_NAMES": '["rollout-group","zone"]',  # Bicep's string() of an array: a TOML array too
    "QUEUE_ACCOUNT_URL": "https://sefwdx.queue.core.windows.net",
    "CLIENT_ID": "00000000-0000-0000-0000-000000000001",
}


def test_agent_config_template_renders_a_valid_config_for_linux_and_windows(tmp_path) -> None:
    template = (REPO / "bicep/agent-config.toml").read_text()
    values = AGENT_VALUES
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
        assert settings.approvals.queue["queue"] == "se-approvals-{vm_id}"
        assert settings.approvals.queue["client_id"] == values["CLIENT_ID"]
        assert settings.approvals.coordinator_only is True
        assert settings.vm.tags == ["rollout-group", "zone"]
        assert str(settings.state.dir).replace("\\", "/") == state_dir


def test_logs_are_off_by_default_and_publish_rights_go_to_the_agent_identities(
    bicep_docs: dict[str, dict],
) -> None:
    hub = bicep_docs["hub.bicep"]
    assert hub["parameters"]["deployLogsIngestion"]["default"] is False
    for name in ("logsTable", "logsIngestion"):
        assert hub["modules"][name]["config"]["condition"] == "deployLogsIngestion"
    params = {k: expr(v) for k, v in module_body(hub["modules"]["logsIngestion"])["params"].items()}
    assert params["columns"] == "logsColumns"
    batch = {k: expr(v) for k, v in module_body(bicep_docs["modules/agent-batch.bicep"]["modules"]["access"])
             ["params"].items()}
    assert batch["dataCollectionRuleName"] == "conditional(withLogs, hub.logsRuleName, )"


def test_table_stream_and_agent_rows_share_one_schema(bicep_docs: dict[str, dict]) -> None:
    columns = json.loads((REPO / "bicep/logs-columns.json").read_text())
    assert [(c["name"], c["type"]) for c in columns] == list(logs_rows.COLUMNS)
    hub = bicep_docs["hub.bicep"]
    loaded = hub["variables"]["logsColumns"]["value"]["function"]
    assert (loaded["type"], loaded["parameters"]["file_path"]) == ("load_json_content", "logs-columns.json")
    assert expr(module_body(hub["modules"]["logsTable"])["params"]["columns"]) == "logsColumns"
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
        **AGENT_VALUES, "STATE_DIR": "/var/lib/se-forwarder",
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


def test_each_shard_of_the_coordinator_gets_the_consumer_group_it_reads_in_on_both_hubs(
        bicep_docs: dict[str, dict]) -> None:
    from se_forwarder.fleet.coordinator.config.shard import ShardSettings

    hub = bicep_docs["hub.bicep"]
    assert hub["parameters"]["coordinatorShards"]["default"] == []
    params = {k: expr(v) for k, v in module_body(hub["modules"]["eventHubs"])["params"].items()}
    assert params["coordinatorShards"] == "conditional(deployCoordinator, coordinatorShards, [])"
    feed = {k: expr(v) for k, v in module_body(hub["modules"]["azureFeed"])["params"].items()}
    assert feed["coordinatorShards"] == "coordinatorShards"
    made = ShardSettings("eu", frozenset()).consumer_group.replace("eu", "${shard}")
    for path, parent in (("modules/eventhubs.bicep", "hub"), ("modules/azure-feed.bicep", "feedHub")):
        group = bicep_docs[path]["resources"]["shardGroups"]
        assert group["type"] == "Microsoft.EventHub/namespaces/eventhubs/consumergroups", path
        assert loop(group) == "shard in coordinatorShards", path
        assert module_body(group)["name"] == made and module_body(group)["parent"] == parent, path
    assert "coordinatorShardGroups" in hub["outputs"]
    # Standard allows 20 consumer groups a hub: dashboards, coordinator and 18 shards
    assert any(d["type"] == "max_length" and d["argument"] == 18
               for d in hub["parameters"]["coordinatorShards"]["decorators"])
