// One batch of agents.bicep's VMs (all in its subscription): two deployments per VM, so that this
// template holds two resources per VM, whatever each of them holds.
//   - vm-agent.bicep in the VM's resource group: its identity, attached, and the agent installed;
//   - vm-hub-access.bicep in the hub's resource group: its queue and its identity's rights there.
targetScope = 'subscription'

@description('hub.bicep\'s output hub.')
param hub object

@description('This batch\'s VMs: [{ name, resourceGroup, install? }].')
param vms array

@description('Region of the agent identities.')
param location string

@description('Prefix of the identity names.')
param namePrefix string

@description('Operating system of the VMs.')
@allowed([
  'Linux'
  'Windows'
])
param vmOsType string

@description('Attach the agent identities to the VMs.')
param attachIdentityToVms bool

@description('Base URL of the release folder.')
param installerBaseUri string

@description('The release\'s wheel file name.')
param wheelFile string

@description('The release\'s SHA256SUMS.')
param releaseSums string

@description('A SAS token for the release, or empty.')
@secure()
param releaseSasToken string

@description('Download the release with the agent identity.')
param releaseWithAgentIdentity bool

@description('Private index, or empty.')
param packageIndexUrl string

@description('Requirement for the private index, or empty.')
param packageSpec string

@description('The coordinator\'s public key(s).')
param approvalVerifyKeys string

@description('Any change re-runs the installers.')
param installerRunTag string

@description('The agents never approve.')
param approvalsDryRun bool

@description('Only the coordinator approves.')
param coordinatorOnly bool

@description('VM tag names the agents send.')
param agentTagNames array

@description('Azure Monitor Logs is deployed (hub.logs*).')
param withLogs bool

@description('Tags for every new resource.')
param tags object

module agents 'vm-agent.bicep' = [for vm in vms: {
  name: take('se-forwarder-vm-${vm.name}', 64)
  scope: resourceGroup(vm.resourceGroup)
  params: {
    vmName: vm.name
    osType: vmOsType
    location: location
    // Identity names allow letters, digits, '-' and '_'; VM names may also have '.'.
    identityName: take('${namePrefix}-agent-${replace(vm.name, '.', '-')}', 128)
    tags: tags
    attachIdentity: attachIdentityToVms
    installAgent: vm.?install ?? true
    eventHubsNamespace: hub.eventHubsNamespace
    eventHubName: hub.eventHubName
    queueEndpoint: hub.queueEndpoint
    approvalVerifyKeys: approvalVerifyKeys
    approvalsDryRun: approvalsDryRun
    coordinatorOnly: coordinatorOnly
    tagNames: agentTagNames
    installerBaseUri: installerBaseUri
    wheelFile: wheelFile
    releaseSums: releaseSums
    releaseSasToken: releaseSasToken
    releaseWithAgentIdentity: releaseWithAgentIdentity
    packageIndexUrl: packageIndexUrl
    packageSpec: packageSpec
    runTag: installerRunTag
    logsIngestionEndpoint: withLogs ? hub.logsIngestionEndpoint : ''
    logsRuleId: withLogs ? hub.logsRuleId : ''
    logsStream: withLogs ? hub.logsStream : ''
  }
}]

module access 'vm-hub-access.bicep' = [for (vm, i) in vms: {
  // Unique in the hub's resource group across every subscription's VMs.
  name: take('se-forwarder-access-${vm.name}-${uniqueString(subscription().id, vm.resourceGroup, vm.name)}', 64)
  scope: resourceGroup(hub.subscriptionId, hub.resourceGroup)
  params: {
    storageAccountName: hub.storageAccountName
    namespaceName: hub.namespaceName
    eventHubName: hub.eventHubName
    dataCollectionRuleName: withLogs ? hub.logsRuleName : ''
    vmId: agents[i].outputs.vmId
    agentPrincipalId: agents[i].outputs.principalId
    senderPrincipalId: hub.coordinatorPrincipalId
  }
}]

@description('Per VM: its resource group, vmId, approval queue, and agent identity (resource ID and client ID).')
output agents array = [for (vm, i) in vms: {
  vmName: vm.name
  resourceGroup: vm.resourceGroup
  vmId: agents[i].outputs.vmId
  queue: access[i].outputs.queueName
  identityId: agents[i].outputs.identityId
  clientId: agents[i].outputs.clientId
}]
