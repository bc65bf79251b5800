// se-forwarder for the VMs of one resource group, in one deployment: hub.bicep in the resource
// group hubResourceGroupName (made if it does not exist) and agents.bicep for the VMs of
// vmResourceGroupName, both in this subscription. A fleet in several subscriptions or resource
// groups deploys hub.bicep once and agents.bicep per subscription instead (docs/deploy.md, "Layout").
//
// It downloads, from installerBaseUri (a release folder made by scripts/release): the wheel
// (wheelFile), linux/install.sh, linux/se-forwarder.service, linux/10-restart-backoff.conf and
// windows/install.ps1, each checked on the VM against releaseSums before anything runs; its
// templates are modules/*.bicep, agent-config.toml, agent-config-logs.toml, logs-columns.json and
// ../deploy/vm-extension/linux-extension.sh (tests/deploy/test_docs_files.py checks they exist).
//
//   az deployment sub create -l westeurope -f bicep/main.bicep -p @release.parameters.json \
//     -p vmResourceGroupName=RG vmNames='["vm-a","vm-b"]' installerBaseUri=https://.../se-forwarder-0.1.0 \
//     approvalVerifyKeys="$(cat approvals.pub)"
targetScope = 'subscription'

@description('Region of the new resources. The VMs keep their own region.')
param location string = deployment().location

@description('Resource group of the shared resources (made if it does not exist).')
param hubResourceGroupName string = 'se-hub'

@description('Lowercase letters and digits that start every resource name.')
@minLength(3)
@maxLength(11)
param namePrefix string = 'sefwd'

@description('Names of the existing VMs that get the agent, each its identity and its approval queue.')
@minLength(1)
param vmNames array

@description('Resource group of the VMs, in this subscription.')
param vmResourceGroupName string

@description('Operating system of the listed VMs; deploy once per OS for a mixed fleet.')
@allowed([
  'Linux'
  'Windows'
])
param vmOsType string = 'Linux'

@description('Attach the agent identities to the VMs (a PUT of each VM with only its identity block, which keeps the identities each VM has).')
param attachIdentityToVms bool = true

@description('Base URL of a release folder made by scripts/release, without a SAS token.')
param installerBaseUri string

@description('The release\'s wheel file name (release.parameters.json).')
param wheelFile string

@description('The release\'s SHA256SUMS (release.parameters.json).')
@minLength(64)
param releaseSums string

@description('A read-only SAS token (without "?") for the release\'s container; empty for none.')
@secure()
param releaseSasToken string = ''

@description('The VMs download the release with their agent identity.')
param releaseWithAgentIdentity bool = false

@description('Your private index (pip --index-url) for the wheel\'s dependencies (or packageSpec); empty: PyPI.')
param packageIndexUrl string = ''

@description('A pinned requirement from packageIndexUrl instead of the wheel; empty: the wheel.')
param packageSpec string = ''

@description('The coordinator\'s Ed25519 public key(s) (approvals.pub), several separated by commas while rotating; a change re-runs the installer on every VM.')
@minLength(44)
param approvalVerifyKeys string

@description('Change to re-run the installer on every VM.')
param installerRunTag string = ''

@description('true: the agents only report and never approve.')
param approvalsDryRun bool = false

@description('Also create the coordinator\'s identity, consumer group, container and rights.')
param deployCoordinator bool = false

@description('true: only the coordinator approves ([approvals] coordinator_only); the default with a coordinator.')
param coordinatorOnly bool = deployCoordinator

@description('VM tag names the agents send with their reports ([vm] tags), for tag budgets.')
param agentTagNames array = []

@description('With the coordinator: a key vault for its signing key.')
param deployKeyVault bool = false

@description('Event hub that receives the CloudEvents.')
param eventHubName string = 'scheduled-events'

@description('Days the hub keeps events (7: what a coordinator that lost its snapshots rebuilds from).')
@minValue(1)
@maxValue(7)
param eventHubRetentionDays int = 7

@description('Subnet resource IDs allowed to reach Event Hubs and Storage over their public endpoints.')
param allowedSubnetIds array = []

@description('Public IP ranges (CIDR) allowed to reach Event Hubs and Storage.')
param allowedIpRanges array = []

@description('Public network access of the namespace, the account and the vault (Disabled: private endpoints only).')
@allowed([
  'Enabled'
  'Disabled'
])
param publicNetworkAccess string = 'Enabled'

@description('Subnet for private endpoints; empty for none.')
param privateEndpointSubnetId string = ''

@description('Private DNS zones for the endpoints: { eventhubs, queue, blob, vault }.')
param privateDnsZoneIds object = {}

@description('Also Azure\'s own Scheduled Events feed (preview; needs deployCoordinator): the feed hub, this subscription\'s Event Grid system topic, the coordinator\'s reads of the VMs\' resource group.')
param deployAzureFeed bool = false

@description('With deployAzureFeed: Scheduled Events Contributor for the coordinator on the VMs\' resource group.')
param azureFeedAcknowledge bool = false

@description('Standalone VMs of the VMs\' resource group to opt in to Azure\'s feed.')
param scheduledEventsVmNames array = []

@description('Scale sets of the VMs\' resource group to opt in to Azure\'s feed.')
param scheduledEventsScaleSetNames array = []

@description('allInstancesDown.automaticallyApprove of the opted-in VMs and scale sets (Azure\'s default true).')
param allInstancesDownAutoApprove bool = true

@description('Log Analytics workspace for the audit logs; empty for none.')
param logAnalyticsWorkspaceId string = ''

@description('Also send every agent\'s events to Azure Monitor Logs (needs logAnalyticsWorkspaceId).')
param deployLogsIngestion bool = false

@description('Tags for every new resource.')
param tags object = {}

resource hubGroup 'Microsoft.Resources/resourceGroups@2024-03-01' = {
  name: hubResourceGroupName
  location: location
  tags: tags
}

module hub 'hub.bicep' = {
  name: 'se-forwarder-hub'
  scope: hubGroup
  params: {
    location: location
    namePrefix: namePrefix
    eventHubName: eventHubName
    eventHubRetentionDays: eventHubRetentionDays
    allowedSubnetIds: allowedSubnetIds
    allowedIpRanges: allowedIpRanges
    publicNetworkAccess: publicNetworkAccess
    privateEndpointSubnetId: privateEndpointSubnetId
    privateDnsZoneIds: privateDnsZoneIds
    deployCoordinator: deployCoordinator
    deployKeyVault: deployKeyVault
    deployAzureFeed: deployAzureFeed
    logAnalyticsWorkspaceId: logAnalyticsWorkspaceId
    deployLogsIngestion: deployLogsIngestion
    tags: tags
  }
}

var withFeed = deployAzureFeed && deployCoordinator
var policyTargets = empty(scheduledEventsVmNames) && empty(scheduledEventsScaleSetNames) ? [] : [
  {
    resourceGroup: vmResourceGroupName
    vmNames: scheduledEventsVmNames
    scaleSetNames: scheduledEventsScaleSetNames
  }
]

module agents 'agents.bicep' = {
  name: 'se-forwarder-agents'
  params: {
    hub: hub.outputs.hub
    vms: [for vm in vmNames: {
      name: vm
      resourceGroup: vmResourceGroupName
    }]
    location: location
    namePrefix: namePrefix
    vmOsType: vmOsType
    attachIdentityToVms: attachIdentityToVms
    installerBaseUri: installerBaseUri
    wheelFile: wheelFile
    releaseSums: releaseSums
    releaseSasToken: releaseSasToken
    releaseWithAgentIdentity: releaseWithAgentIdentity
    packageIndexUrl: packageIndexUrl
    packageSpec: packageSpec
    approvalVerifyKeys: approvalVerifyKeys
    installerRunTag: installerRunTag
    approvalsDryRun: approvalsDryRun
    coordinatorOnly: coordinatorOnly
    agentTagNames: agentTagNames
    coordinatorResourceGroups: withFeed ? [
      vmResourceGroupName
    ] : []
    azureFeedAcknowledge: azureFeedAcknowledge
    deployAzureFeed: withFeed
    azureFeedResourceGroup: hubGroup.name
    scheduledEventsTargets: policyTargets
    allInstancesDownAutoApprove: allInstancesDownAutoApprove
    tags: tags
  }
}

@description('Event Hubs namespace host name (fully_qualified_namespace for consumers).')
output eventHubsNamespace string = hub.outputs.eventHubsNamespace

@description('Event hub with the fleet\'s CloudEvents.')
output eventHubName string = hub.outputs.eventHubName

@description('Consumer group for dashboards.')
output dashboardsConsumerGroup string = hub.outputs.dashboardsConsumerGroup

@description('Consumer group of the coordinator, or empty.')
output coordinatorConsumerGroup string = hub.outputs.coordinatorConsumerGroup

@description('Queue service endpoint ([queues] account_url).')
output queueEndpoint string = hub.outputs.queueEndpoint

@description('Per VM: resource group, vmId, approval queue (se-approvals-<vmId>), agent identity.')
output agents array = agents.outputs.agents

@description('Client ID of the coordinator\'s identity, or empty.')
output coordinatorClientId string = hub.outputs.coordinatorClientId

@description('Resource ID of the coordinator\'s identity, to attach to the coordinator\'s VM, or empty.')
output coordinatorIdentityId string = hub.outputs.coordinatorIdentityId

@description('Blob endpoint and container of the coordinator, or empty.')
output coordinatorStorage object = hub.outputs.coordinatorStorage

@description('The key vault for the coordinator\'s signing key, or empty.')
output keyVaultUri string = hub.outputs.keyVaultUri

@description('Azure\'s feed for the coordinator\'s [azure.feed], or empty.')
output azureFeed object = hub.outputs.azureFeed

@description('Logs ingestion URL of the data collection endpoint, or empty.')
output logsIngestionEndpoint string = hub.outputs.logsIngestionEndpoint

@description('Immutable ID of the data collection rule, or empty.')
output logsRuleId string = hub.outputs.logsRuleId
