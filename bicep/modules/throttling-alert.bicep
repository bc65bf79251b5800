// An Azure Monitor metric alert on an Event Hubs namespace's ThrottledRequests: requests Event Hubs
// refused because the namespace ran out of throughput units. The agents' sinks retry and the
// coordinator's reads fall behind (its lag guard then stops early approvals), so throttling is
// something to act on: raise the namespace's maximum throughput units, or look for a VM flooding it.

@description('Name of the alert rule.')
param name string

@description('Resource ID of the Event Hubs namespace to watch.')
param namespaceId string

@description('Action groups (resource IDs) the alert notifies; empty: it fires in the portal only.')
param actionGroupIds array = []

@description('Tags for the alert rule.')
param tags object = {}

resource alert 'Microsoft.Insights/metricAlerts@2018-03-01' = {
  name: name
  location: 'global'
  tags: tags
  properties: {
    description: 'se-forwarder: Event Hubs throttled requests (the namespace needs more throughput units, or a sender floods it).'
    severity: 2
    enabled: true
    scopes: [
      namespaceId
    ]
    evaluationFrequency: 'PT1M'
    windowSize: 'PT5M'
    criteria: {
      'odata.type': 'Microsoft.Azure.Monitor.SingleResourceMultipleMetricCriteria'
      allOf: [
        {
          name: 'throttled'
          criterionType: 'StaticThresholdCriterion'
          metricNamespace: 'Microsoft.EventHub/namespaces'
          metricName: 'ThrottledRequests'
          operator: 'GreaterThan'
          threshold: 0
          timeAggregation: 'Total'
        }
      ]
    }
    autoMitigate: true
    actions: [for group in actionGroupIds: {
      actionGroupId: group
    }]
  }
}

@description('Resource ID of the alert rule.')
output alertId string = alert.id
