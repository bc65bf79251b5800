// se-forwarder for a fleet of VMs, in one deployment:
//   - an Event Hubs namespace and hub (Entra ID only, TLS 1.2) with a "dashboards" consumer group;
//   - a storage account (shared keys off, HTTPS only) with one approval queue per VM;
//   - a user-assigned managed identity per VM, attached to it, whose only rights are
//     "Azure Event Hubs Data Sender" on the hub and "Storage Queue Data Message Processor" on that
//     VM's own queue;
//   - the agent on each VM, installed by the Custom Script Extension with a config that points at
//     these resources;
//   - optionally the coordinator's identity: "Azure Event Hubs Data Receiver" and "Azure Event Hubs
//     Data Sender" on the hub (it reads the agents' events and publishes its decisions there),
//     "Storage Queue Data Message Sender" on the queues, and "Storage Blob Data Contributor" on its
//     own blob container (leader lease and snapshots);
//   - optionally (deployAzureFeed, with the coordinator) Azure's own Scheduled Events feed (preview):
//     the Azure feed hub, the Event Grid system topic of the subscription's maintenance resources
//     delivering to it in CloudEvents schema with its own identity ("Azure Event Hubs Data Sender" on
//     that hub only), "Azure Event Hubs Data Receiver" on it for the coordinator, "Reader" on the VMs'
//     resource group for Resource Graph and, with azureFeedAcknowledge, "Scheduled Events
//     Contributor" there to acknowledge; and the opt-in of the VMs and scale sets named in
//     scheduledEventsVmNames and scheduledEventsScaleSetNames;
//   - optionally (deployLogsIngestion) Azure Monitor Logs: a custom table in logAnalyticsWorkspaceId,
//     a data collection endpoint and rule, "Monitoring Metrics Publisher" on that rule for each agent
//     identity, and a logs-ingestion sink in every agent's configuration.
//
//   az deployment group create -g RG -f bicep/main.bicep -p vmNames='["vm-a","vm-b"]' \
//     -p installerBaseUri=https://.../deploy -p approvalVerifyKeys=@approvals.key.pub
targetScope = 'resourceGroup'

@description('Region of the new resources. The VMs keep their own region.')
param location string = resourceGroup().location

@description('Lowercase letters and digits that start every resource name.')
@minLength(3)
@maxLength(11)
param namePrefix string = 'sefwd'

@description('Names of the existing VMs that get the agent, each its identity and its approval queue.')
@minLength(1)
param vmNames array

@description('Resource group of the VMs (default: this deployment\'s).')
param vmResourceGroupName string = resourceGroup().name

@description('Operating system of the listed VMs; deploy once per OS for a mixed fleet.')
@allowed([
  'Linux'
  'Windows'
])
param vmOsType string = 'Linux'

@description('Attach the agent identities to the VMs (a PUT of each VM with only its identity block, which keeps the system-assigned and user-assigned identities each VM has). false: attach them by other means (the VMs\' own templates, Azure Policy); the output agentIdentities lists them.')
param attachIdentityToVms bool = true

@description('Base URL of the deploy/ folder of a se-forwarder release: linux/install.sh, linux/se-forwarder.service and windows/install.ps1 are downloaded from it.')
param installerBaseUri string

@description('pip requirement installed on the VMs (with deployLogsIngestion, the default gains the logs-ingestion extra; a custom one must name it).')
param packageSpec string = 'se-forwarder[eventhubs,queue]'

@description('The coordinator\'s Ed25519 public key(s) that approval messages must be signed with: base64 of the raw 32 bytes (the .pub file of se-forwarder fleet keygen), several separated by commas for rotation. Public: the private key never goes to a VM.')
@minLength(44)
param approvalVerifyKeys string

@description('Change to re-run the installer on every VM, e.g. after changing approvalVerifyKeys (a change of the keys alone does not).')
param installerRunTag string = ''

@description('true: the agents only report and never approve an event early.')
param approvalsDryRun bool = false

@description('Event hub that receives the CloudEvents.')
param eventHubName string = 'scheduled-events'

@description('Partitions of the hub.')
@minValue(1)
@maxValue(32)
param eventHubPartitionCount int = 4

@description('Days the hub keeps events.')
@minValue(1)
@maxValue(7)
param eventHubRetentionDays int = 1

@description('Subnet resource IDs (the VMs\', the coordinator\'s) allowed to reach Event Hubs and Storage; they need the Microsoft.EventHub and Microsoft.Storage service endpoints. Empty together with allowedIpRanges: any network may connect (authentication is Entra ID only either way).')
param allowedSubnetIds array = []

@description('Public IP ranges (CIDR) allowed to reach Event Hubs and Storage, e.g. the coordinator\'s egress.')
param allowedIpRanges array = []

@description('Also create the coordinator\'s identity with receive and send rights on the hub, send rights on the queues, and its blob container.')
param deployCoordinator bool = false

@description('Also give the coordinator Azure\'s own Scheduled Events feed (preview; needs deployCoordinator): the Azure feed hub, the Event Grid system topic of this subscription\'s maintenance resources delivering to it, and Reader on the VMs\' resource group for Resource Graph. A subscription holds one such system topic.')
param deployAzureFeed bool = false

@description('With deployAzureFeed: let the coordinator approve events through the Maintenance acknowledge ([azure] acknowledge = true), with the Scheduled Events Contributor role on the VMs\' resource group.')
param azureFeedAcknowledge bool = false

@description('Event hub of Azure\'s feed ([azure.feed] eventhub).')
param azureFeedHubName string = 'azure-feed'

@description('Standalone VMs (in no availability set or scale set) of the VMs\' resource group to opt in to Azure\'s feed (scheduledEventsPolicy); an availability set opts in in its own template.')
param scheduledEventsVmNames array = []

@description('Scale sets of the VMs\' resource group to opt in to Azure\'s feed (scheduledEventsPolicy).')
param scheduledEventsScaleSetNames array = []

@description('Log Analytics workspace for the queues\' and the namespace\'s audit logs; empty for none.')
param logAnalyticsWorkspaceId string = ''

@description('Also send every agent\'s events to Azure Monitor Logs: table SeForwarderEvents_CL in logAnalyticsWorkspaceId (required then), a data collection endpoint and rule, and the agents\' right to send to it.')
param deployLogsIngestion bool = false

@description('Region of the data collection endpoint and rule: the workspace\'s region.')
param logsLocation string = location

@description('Days the events stay in SeForwarderEvents_CL.')
@minValue(4)
@maxValue(730)
param logsRetentionDays int = 30

@description('Tags for every new resource.')
param tags object = {}

var prefix = toLower(namePrefix)
var suffix = uniqueString(resourceGroup().id, prefix)
// Queue names: the agent's rule (se_forwarder/approvals/queue/names.py; a test evaluates these
// lines against it). The VM name lowercased, each run of '_', '.' and '-' one '-', none at either
// end; when that changed the name (scale-set instances: vmss_3) or it is too long, the name is cut
// and '-' + uniqueString(lowercased name) appended, so no two VMs share a queue. At most 56
// characters: the agent's poison queue adds '-poison' (63 is the limit).
var queueLowered = [for vm in vmNames: toLower(vm)]
var queueDashed = [for name in queueLowered: replace(replace(name, '_', '-'), '.', '-')]
var queueCollapsed = [for name in queueDashed: replace(replace(replace(replace(replace(replace(replace(name, '--', '-'), '--', '-'), '--', '-'), '--', '-'), '--', '-'), '--', '-'), '--', '-')]
var queueNoLead = [for name in queueCollapsed: startsWith(name, '-') ? skip(name, 1) : name]
var queueLegal = [for name in queueNoLead: endsWith(name, '-') ? take(name, length(name) - 1) : name]
var queueShort = [for name in queueLegal: endsWith(take(name, 29), '-') ? take(name, 28) : take(name, 29)]
var queueHashes = [for name in queueLowered: uniqueString(name)]
var queueNames = [for (name, i) in queueLegal: ((name != queueLowered[i]) || (length(name) > 43)) ? 'se-approvals-${queueShort[i]}-${queueHashes[i]}' : 'se-approvals-${name}']
// The workspace's subscription, resource group and name, from its resource ID (a placeholder
// without one, so that nothing is indexed out of range when Logs are off).
var workspaceParts = split(empty(logAnalyticsWorkspaceId) ? '/subscriptions/none/resourceGroups/none/providers/Microsoft.OperationalInsights/workspaces/none' : logAnalyticsWorkspaceId, '/')
var logsColumns = loadJsonContent('logs-columns.json')
var defaultPackageSpec = 'se-forwarder[eventhubs,queue]'
// The agents need the logs-ingestion extra for the Logs sink (a custom packageSpec must name it).
var agentPackageSpec = deployLogsIngestion && packageSpec == defaultPackageSpec ? 'se-forwarder[eventhubs,queue,logs-ingestion]' : packageSpec

module identities 'modules/identities.bicep' = {
  name: 'se-forwarder-identities'
  params: {
    location: location
    namePrefix: prefix
    vmNames: vmNames
    deployCoordinator: deployCoordinator
    tags: tags
  }
}

module eventHubs 'modules/eventhubs.bicep' = {
  name: 'se-forwarder-eventhubs'
  params: {
    location: location
    namespaceName: '${prefix}-eh-${suffix}'
    eventHubName: eventHubName
    partitionCount: eventHubPartitionCount
    messageRetentionInDays: eventHubRetentionDays
    senderPrincipalIds: identities.outputs.agentPrincipalIds
    receiverPrincipalId: identities.outputs.coordinatorPrincipalId
    allowedSubnetIds: allowedSubnetIds
    allowedIpRanges: allowedIpRanges
    allowTrustedServices: deployAzureFeed && deployCoordinator
    logAnalyticsWorkspaceId: logAnalyticsWorkspaceId
    tags: tags
  }
}

module azureFeed 'modules/azure-feed.bicep' = if (deployAzureFeed && deployCoordinator) {
  name: 'se-forwarder-azure-feed'
  params: {
    namespaceName: eventHubs.outputs.namespaceName
    feedHubName: azureFeedHubName
    coordinatorPrincipalId: identities.outputs.coordinatorPrincipalId
    systemTopicName: '${prefix}-maintenance-${suffix}'
    tags: tags
  }
}

module coordinatorAzureRoles 'modules/coordinator-azure-roles.bicep' = if (deployAzureFeed && deployCoordinator) {
  name: 'se-forwarder-coordinator-azure-roles'
  scope: resourceGroup(vmResourceGroupName)
  params: {
    coordinatorPrincipalId: identities.outputs.coordinatorPrincipalId
    acknowledge: azureFeedAcknowledge
  }
}

module scheduledEventsPolicy 'modules/scheduled-events-policy.bicep' = if (!empty(scheduledEventsVmNames) || !empty(scheduledEventsScaleSetNames)) {
  name: 'se-forwarder-scheduled-events-policy'
  scope: resourceGroup(vmResourceGroupName)
  params: {
    vmNames: scheduledEventsVmNames
    scaleSetNames: scheduledEventsScaleSetNames
  }
}

module approvalQueues 'modules/approval-queues.bicep' = {
  name: 'se-forwarder-approval-queues'
  params: {
    location: location
    storageAccountName: take('${prefix}${suffix}', 24)
    queueNames: queueNames
    processorPrincipalIds: identities.outputs.agentPrincipalIds
    senderPrincipalId: identities.outputs.coordinatorPrincipalId
    allowedSubnetIds: allowedSubnetIds
    allowedIpRanges: allowedIpRanges
    logAnalyticsWorkspaceId: logAnalyticsWorkspaceId
    tags: tags
  }
}

module logsTable 'modules/logs-table.bicep' = if (deployLogsIngestion) {
  name: 'se-forwarder-logs-table'
  scope: resourceGroup(workspaceParts[2], workspaceParts[4])
  params: {
    workspaceName: workspaceParts[8]
    columns: logsColumns
    retentionInDays: logsRetentionDays
  }
}

module logsIngestion 'modules/logs-ingestion.bicep' = if (deployLogsIngestion) {
  name: 'se-forwarder-logs-ingestion'
  params: {
    location: logsLocation
    endpointName: '${prefix}-dce-${suffix}'
    ruleName: '${prefix}-dcr-${suffix}'
    workspaceResourceId: logAnalyticsWorkspaceId
    tableName: deployLogsIngestion ? logsTable.outputs.tableName : ''
    columns: logsColumns
    publisherPrincipalIds: identities.outputs.agentPrincipalIds
    tags: tags
  }
}

module agents 'modules/vm-agent.bicep' = [for (vm, i) in vmNames: {
  name: take('se-forwarder-vm-${vm}', 64)
  scope: resourceGroup(vmResourceGroupName)
  params: {
    vmName: vm
    osType: vmOsType
    attachIdentity: attachIdentityToVms
    agentIdentityId: identities.outputs.agentIds[i]
    agentClientId: identities.outputs.agentClientIds[i]
    eventHubsNamespace: eventHubs.outputs.fullyQualifiedNamespace
    eventHubName: eventHubs.outputs.eventHubName
    queueEndpoint: approvalQueues.outputs.queueEndpoint
    queueName: queueNames[i]
    approvalVerifyKeys: approvalVerifyKeys
    approvalsDryRun: approvalsDryRun
    installerBaseUri: installerBaseUri
    packageSpec: agentPackageSpec
    runTag: installerRunTag
    logsIngestionEndpoint: deployLogsIngestion ? logsIngestion.outputs.logsIngestionEndpoint : ''
    logsRuleId: deployLogsIngestion ? logsIngestion.outputs.ruleImmutableId : ''
    logsStream: deployLogsIngestion ? logsIngestion.outputs.streamName : ''
  }
}]

@description('Event Hubs namespace host name (fully_qualified_namespace for consumers).')
output eventHubsNamespace string = eventHubs.outputs.fullyQualifiedNamespace

@description('Event hub with the fleet\'s CloudEvents.')
output eventHubName string = eventHubs.outputs.eventHubName

@description('Consumer group for dashboards.')
output dashboardsConsumerGroup string = eventHubs.outputs.dashboardsConsumerGroup

@description('Queue service endpoint (account_url).')
output queueEndpoint string = approvalQueues.outputs.queueEndpoint

@description('Per VM: its approval queue and that queue\'s URL, for the coordinator.')
output approvalQueues array = [for (vm, i) in vmNames: {
  vmName: vm
  queue: queueNames[i]
  url: approvalQueues.outputs.queueUrls[i]
}]

@description('Per VM: the resource ID and client ID of its agent identity.')
output agentIdentities array = [for (vm, i) in vmNames: {
  vmName: vm
  identityId: identities.outputs.agentIds[i]
  clientId: identities.outputs.agentClientIds[i]
}]

@description('Client ID of the coordinator\'s identity (AZURE_CLIENT_ID for `se-forwarder fleet`), or empty.')
output coordinatorClientId string = identities.outputs.coordinatorClientId

@description('Logs ingestion URL of the data collection endpoint (endpoint of a logs-ingestion sink), or empty.')
output logsIngestionEndpoint string = deployLogsIngestion ? logsIngestion.outputs.logsIngestionEndpoint : ''

@description('Immutable ID of the data collection rule (rule_id of a logs-ingestion sink), or empty.')
output logsRuleId string = deployLogsIngestion ? logsIngestion.outputs.ruleImmutableId : ''

@description('Azure\'s feed for the coordinator\'s [azure.feed] (eventhub, consumer_group) and its system topic, or empty.')
output azureFeed object = {
  eventHub: deployAzureFeed && deployCoordinator ? azureFeed.outputs.feedHubName : ''
  consumerGroup: deployAzureFeed && deployCoordinator ? azureFeed.outputs.feedConsumerGroup : ''
  systemTopicId: deployAzureFeed && deployCoordinator ? azureFeed.outputs.systemTopicId : ''
}

@description('Resource ID of the coordinator\'s identity, to attach to where the coordinator runs, or empty.')
output coordinatorIdentityId string = identities.outputs.coordinatorId

@description('Blob endpoint and container of the coordinator (storage.account_url and storage.container), or empty.')
output coordinatorStorage object = {
  accountUrl: deployCoordinator ? approvalQueues.outputs.blobEndpoint : ''
  container: approvalQueues.outputs.coordinatorContainer
}
