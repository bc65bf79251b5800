// se-forwarder's agents on the VMs of one subscription, in any of its resource groups, sending to
// the shared hub of hub.bicep (which may be in another subscription of the same tenant):
//   - per VM, in the VM's resource group: a user-assigned identity of its own, attached to it, and
//     the agent installed by the Custom Script Extension from a release (wheel and installer files
//     checked against the release's SHA256SUMS on the VM), configured for the hub and its queue;
//   - per VM, in the hub's resource group: its approval queue se-approvals-<vmId> and its identity's
//     only rights: Azure Event Hubs Data Sender on the hub, Storage Queue Data Message Processor on
//     that queue (and Monitoring Metrics Publisher on the data collection rule with Logs); the
//     coordinator's Storage Queue Data Message Sender on that queue;
//   - the VMs in batches of batchSize, each batch a deployment of its own with two resources per VM,
//     so that no template comes near ARM's limit of 800 resources (tests/deploy/test_bicep_scale.py);
//   - optionally the coordinator's reads of these VMs (a custom role narrower than Reader) on the
//     resource groups in coordinatorResourceGroups, and Scheduled Events Contributor there with
//     azureFeedAcknowledge;
//   - optionally (deployAzureFeed) this subscription's Event Grid system topic of maintenance
//     resources, delivering to the Azure feed hub, and the opt-in of VMs and scale sets
//     (scheduledEventsTargets).
//
//   az deployment sub create -l westeurope -f bicep/agents.bicep \
//     -p hub=@hub.outputs.json -p @release.parameters.json -p vms=@vms.json \
//     -p installerBaseUri=https://ACCOUNT.blob.core.windows.net/releases/se-forwarder-0.1.0 \
//     -p approvalVerifyKeys="$(cat approvals.pub)"
targetScope = 'subscription'

@description('hub.bicep\'s output hub: subscriptionId, resourceGroup, namespaceName, eventHubsNamespace, eventHubName, storageAccountName, queueEndpoint, coordinatorPrincipalId, azureFeedNamespaceName, azureFeedHubName, logs*.')
param hub object

@description('The VMs of this subscription: [{ name, resourceGroup }], each existing; "install": false leaves out the Custom Script Extension of a VM that holds another one (install it with a Run Command: docs/deploy.md).')
@minLength(1)
param vms array

@description('VMs per batch: each batch is one deployment with two resources per VM (at most 350: 700 of ARM\'s 800).')
@minValue(1)
@maxValue(350)
param batchSize int = 100

@description('Region of the agent identities (a region of this subscription).')
param location string = deployment().location

@description('Lowercase letters and digits that start every resource name.')
@minLength(3)
@maxLength(11)
param namePrefix string = 'sefwd'

@description('Operating system of the listed VMs; deploy once per OS for a mixed fleet.')
@allowed([
  'Linux'
  'Windows'
])
param vmOsType string = 'Linux'

@description('Attach the agent identities to the VMs (a PUT of each VM with only its identity block, which keeps the identities each VM has). false: attach them by other means; the output agents lists them.')
param attachIdentityToVms bool = true

@description('Base URL of a release folder made by scripts/release (its wheel, linux/ and windows/ files), without a SAS token.')
param installerBaseUri string

@description('The release\'s wheel file name (release.parameters.json).')
param wheelFile string

@description('The release\'s SHA256SUMS (release.parameters.json): every file the VMs download is checked against it before anything runs.')
@minLength(64)
param releaseSums string

@description('A read-only SAS token (without "?") for the release\'s container; empty when the VMs download with their identity or the release is public.')
@secure()
param releaseSasToken string = ''

@description('The VMs download the release with their agent identity (managedIdentity of the extension): give the identities Storage Blob Data Reader on the release\'s container (docs/deploy.md).')
param releaseWithAgentIdentity bool = false

@description('Your private index (pip --index-url): where the wheel\'s dependencies (or packageSpec) come from; empty: pip\'s default index (PyPI).')
param packageIndexUrl string = ''

@description('A pinned requirement installed from packageIndexUrl instead of the wheel, e.g. se-forwarder[eventhubs,queue]==0.1.0 (add the logs-ingestion extra with Logs); empty: the wheel.')
param packageSpec string = ''

@description('The coordinator\'s Ed25519 public key(s) that approval messages must be signed with: base64 of the raw 32 bytes (approvals.pub), several separated by commas while rotating. A change re-runs the installer on every VM.')
@minLength(44)
param approvalVerifyKeys string

@description('Change to re-run the installer on every VM.')
param installerRunTag string = ''

@description('true: the agents only report and never approve, not even the coordinator\'s messages.')
param approvalsDryRun bool = false

@description('true: only the coordinator approves ([approvals] coordinator_only): the default when hub.bicep made a coordinator.')
param coordinatorOnly bool = !empty(hub.coordinatorPrincipalId)

@description('VM tag names the agents send with their reports ([vm] tags), for the coordinator\'s tag budgets.')
param agentTagNames array = []

@description('Uniform scale sets of this subscription that autoscale: [{ name, resourceGroup }]. Each gets one identity and rights made once for the set (its instances make their own queues); attach the identity and the extension to the set\'s model as docs/deploy.md shows.')
param scaleSets array = []

@description('Resource groups of this subscription where the coordinator may read the VMs and their scheduled events (Azure\'s feed, Resource Graph); empty: none.')
param coordinatorResourceGroups array = []

@description('With coordinatorResourceGroups: also Scheduled Events Contributor there, for [azure] acknowledge = true.')
param azureFeedAcknowledge bool = false

@description('This subscription\'s Event Grid system topic of maintenance resources, delivering to the Azure feed hub (hub.bicep with deployAzureFeed); a subscription holds one.')
param deployAzureFeed bool = false

@description('Resource group of this subscription for the system topic (with deployAzureFeed).')
param azureFeedResourceGroup string = ''

@description('VMs and scale sets to opt in to Azure\'s feed: [{ resourceGroup, vmNames: [...], scaleSetNames: [...] }] (standalone VMs; an availability set opts in in its own template).')
param scheduledEventsTargets array = []

@description('allInstancesDown.automaticallyApprove of the opted-in VMs and scale sets: Azure approves by itself an event whose every instance is already down (Azure\'s default true).')
param allInstancesDownAutoApprove bool = true

@description('Tags for every new resource.')
param tags object = {}

var prefix = toLower(namePrefix)
var batchCount = (length(vms) + batchSize - 1) / batchSize
var withLogs = !empty(hub.?logsIngestionEndpoint ?? '')

module batches 'modules/agent-batch.bicep' = [for b in range(0, batchCount): {
  name: take('se-forwarder-agents-${uniqueString(deployment().name)}-${b}', 64)
  params: {
    hub: hub
    vms: take(skip(vms, b * batchSize), batchSize)
    location: location
    namePrefix: prefix
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
    withLogs: withLogs
    tags: tags
  }
}]

module setIdentities 'modules/scale-set-identity.bicep' = [for set in scaleSets: {
  name: take('se-forwarder-set-${set.name}', 64)
  scope: resourceGroup(set.resourceGroup)
  params: {
    scaleSetName: set.name
    location: location
    identityName: take('${prefix}-agents-${replace(set.name, '.', '-')}', 128)
    tags: tags
  }
}]

module setAccess 'modules/scale-set-hub-access.bicep' = [for (set, i) in scaleSets: {
  name: take('se-forwarder-set-access-${set.name}-${uniqueString(subscription().id, set.resourceGroup, set.name)}', 64)
  scope: resourceGroup(hub.subscriptionId, hub.resourceGroup)
  params: {
    storageAccountName: hub.storageAccountName
    namespaceName: hub.namespaceName
    eventHubName: hub.eventHubName
    agentPrincipalId: setIdentities[i].outputs.principalId
    senderPrincipalId: hub.coordinatorPrincipalId
  }
}]

module readerRole 'modules/coordinator-reader-role.bicep' = if (!empty(coordinatorResourceGroups)) {
  name: take('se-forwarder-coordinator-reader-${uniqueString(deployment().name)}', 64)
}

module coordinatorRoles 'modules/coordinator-azure-roles.bicep' = [for rg in coordinatorResourceGroups: {
  name: take('se-forwarder-coordinator-roles-${uniqueString(deployment().name)}', 64)
  scope: resourceGroup(rg)
  params: {
    coordinatorPrincipalId: hub.coordinatorPrincipalId
    acknowledge: azureFeedAcknowledge
    readerRoleId: readerRole.outputs.roleDefinitionId
  }
}]

module feedTopic 'modules/azure-feed-topic.bicep' = if (deployAzureFeed) {
  name: take('se-forwarder-feed-topic-${uniqueString(deployment().name)}', 64)
  scope: resourceGroup(empty(azureFeedResourceGroup) ? 'none' : azureFeedResourceGroup)
  params: {
    systemTopicName: '${prefix}-maintenance-${uniqueString(subscription().id)}'
    hubSubscriptionId: hub.subscriptionId
    hubResourceGroup: hub.resourceGroup
    namespaceName: hub.?azureFeedNamespaceName ?? hub.namespaceName  // a hub deployed before the feed had a namespace of its own
    feedHubName: hub.azureFeedHubName
    tags: tags
  }
}

module scheduledEventsPolicy 'modules/scheduled-events-policy.bicep' = [for (target, i) in scheduledEventsTargets: {
  name: take('se-forwarder-scheduled-events-policy-${uniqueString(deployment().name)}-${i}', 64)
  scope: resourceGroup(target.resourceGroup)
  params: {
    vmNames: target.?vmNames ?? []
    scaleSetNames: target.?scaleSetNames ?? []
    allInstancesDownAutoApprove: allInstancesDownAutoApprove
  }
}]

var batchAgents = [for b in range(0, batchCount): batches[b].outputs.agents]

@description('Per VM: its resource group, vmId, approval queue, and agent identity (resource ID and client ID).')
output agents array = flatten(batchAgents)

@description('Per scale set: its identity (resource ID for az vmss identity assign, client ID for the config).')
output scaleSetIdentities array = [for (set, i) in scaleSets: {
  scaleSetName: set.name
  resourceGroup: set.resourceGroup
  identityId: setIdentities[i].outputs.identityId
  clientId: setIdentities[i].outputs.clientId
}]

@description('Resource ID of this subscription\'s system topic, or empty.')
output systemTopicId string = deployAzureFeed ? feedTopic.outputs.systemTopicId : ''
