// One VM's rights on the shared resources, deployed in the hub's resource group whatever the VM's
// subscription: its approval queue, named from the VM's vmId (so that VMs of one name in other
// resource groups or subscriptions never share it), and the agent identity's only role assignments:
// Azure Event Hubs Data Sender on the hub, Storage Queue Data Message Processor on its own queue,
// and (with Azure Monitor Logs) Monitoring Metrics Publisher on the data collection rule; with a
// coordinator also Storage Queue Data Message Sender on this queue for the coordinator. One small
// deployment per VM keeps the batch that calls it at two resources per VM (ARM counts at most 800
// in one template).

@description('The existing queue account.')
param storageAccountName string

@description('The existing Event Hubs namespace.')
param namespaceName string

@description('The existing hub the agents send to.')
param eventHubName string

@description('Name of the existing data collection rule the agent sends rows to; empty: no Azure Monitor Logs.')
param dataCollectionRuleName string = ''

@description('The VM\'s vmId (a GUID that Azure gives each VM, unique across subscriptions).')
param vmId string

@description('Principal ID of the VM\'s agent identity.')
param agentPrincipalId string

@description('Principal ID of the coordinator\'s identity, or empty for none.')
param senderPrincipalId string = ''

// The agent's rule for the template 'se-approvals-{vm_id}' (se_forwarder/approvals/queue/names.py):
// a vmId is lowercase hex and single hyphens, so the name is the template filled in, lowercased.
var vmIdLowered = toLower(vmId)
var queueName = 'se-approvals-${vmIdLowered}'
var queueDataMessageProcessor = '8a0f0c08-91a1-4084-bc3d-661d67233fed'
var queueDataMessageSender = 'c6a89b2d-59bc-44d0-9896-0f6e12d7b80a'
var eventHubsDataSender = '2b629674-e913-4c01-ae53-ef4638d8f975'
var monitoringMetricsPublisher = '3913510d-42f4-4e42-8a64-420c390055eb'

resource namespace 'Microsoft.EventHub/namespaces@2024-01-01' existing = {
  name: namespaceName
}

resource hub 'Microsoft.EventHub/namespaces/eventhubs@2024-01-01' existing = {
  parent: namespace
  name: eventHubName
}

resource dcr 'Microsoft.Insights/dataCollectionRules@2023-03-11' existing = {
  name: empty(dataCollectionRuleName) ? 'none' : dataCollectionRuleName
}

resource agentSends 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(hub.id, agentPrincipalId, eventHubsDataSender)
  scope: hub
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', eventHubsDataSender)
    principalId: agentPrincipalId
    principalType: 'ServicePrincipal'
    description: 'se-forwarder agent: send CloudEvents to this hub only'
  }
}

resource agentPublishes 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!empty(dataCollectionRuleName)) {
  name: guid(dcr.id, agentPrincipalId, monitoringMetricsPublisher)
  scope: dcr
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', monitoringMetricsPublisher)
    principalId: agentPrincipalId
    principalType: 'ServicePrincipal'
    description: 'se-forwarder agent: send rows to this data collection rule only'
  }
}

resource account 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {
  name: storageAccountName
}

resource queueService 'Microsoft.Storage/storageAccounts/queueServices@2023-05-01' existing = {
  parent: account
  name: 'default'
}

resource queue 'Microsoft.Storage/storageAccounts/queueServices/queues@2023-05-01' = {
  parent: queueService
  name: queueName
  properties: {
    metadata: {
      purpose: 'se-forwarder approvals'
    }
  }
}

resource agentProcesses 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(queue.id, agentPrincipalId, queueDataMessageProcessor)
  scope: queue
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', queueDataMessageProcessor)
    principalId: agentPrincipalId
    principalType: 'ServicePrincipal'
    description: 'se-forwarder agent: receive and delete approvals on its own queue only'
  }
}

resource coordinatorSends 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!empty(senderPrincipalId)) {
  name: guid(queue.id, senderPrincipalId, queueDataMessageSender)
  scope: queue
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', queueDataMessageSender)
    principalId: senderPrincipalId
    principalType: 'ServicePrincipal'
    description: 'se-forwarder coordinator: send approvals to this queue'
  }
}

@description('The queue\'s name (the agent\'s and the coordinator\'s template se-approvals-{vm_id}, filled in).')
output queueName string = queue.name

@description('The queue\'s URL.')
output queueUrl string = 'https://${account.name}.queue.${environment().suffixes.storage}/${queue.name}'
