// One VM, deployed in the VM's own resource group (any subscription): its agent identity (a
// user-assigned identity next to the VM, so that VMs of one name in two resource groups never share
// one), attached to it, and the agent installed by the Custom Script Extension from a release
// (the wheel and the installer files, checked against the release's SHA256SUMS on the VM) with a
// configuration pointing at the fleet's hub and at this VM's own approval queue.
//
// Attaching an identity means a PUT of the VM with only its identity block: the Compute resource
// provider keeps every other property, but the identity block is replaced as a whole. So the block
// is the VM's identities as they are now (read by vm-identity.bicep, in a deployment of its own)
// plus the agent's: a system-assigned identity stays (with its principal ID and role assignments),
// and so do the user-assigned identities the VM already has.

@description('Name of the existing VM.')
param vmName string

@description('Operating system of the VM.')
@allowed([
  'Linux'
  'Windows'
])
param osType string

@description('Attach the agent identity here (false: it is attached by other means, e.g. the VM\'s own template).')
param attachIdentity bool = true

@description('Install the agent with the Custom Script Extension (false: the VM holds another Custom Script Extension, and a Run Command installs it: docs/deploy.md).')
param installAgent bool = true

@description('Region of the agent identity.')
param location string

@description('Name of this VM\'s agent identity (in the VM\'s resource group).')
param identityName string

@description('Tags for the identity.')
param tags object = {}

@description('Event Hubs namespace host name.')
param eventHubsNamespace string

@description('Event hub name.')
param eventHubName string

@description('Queue service endpoint (https://acct.queue.core.windows.net).')
param queueEndpoint string

@description('The coordinator\'s Ed25519 public key(s) (base64, comma-separated) that approval messages must verify with.')
param approvalVerifyKeys string

@description('true: the agent never approves, it only reports.')
param approvalsDryRun bool = false

@description('true: only the coordinator\'s signed messages approve ([approvals] coordinator_only).')
param coordinatorOnly bool = false

@description('Names of the VM tags the agent sends with its reports ([vm] tags).')
param tagNames array = []

@description('Base URL of a release folder (scripts/release): the wheel, linux/install.sh, linux/se-forwarder.service, windows/install.ps1.')
param installerBaseUri string

@description('The wheel\'s file name in the release (release.parameters.json: wheelFile).')
param wheelFile string

@description('The release\'s SHA256SUMS (release.parameters.json: releaseSums): every downloaded file is checked against it on the VM.')
param releaseSums string

@description('A SAS token (without "?") for the release\'s container; empty: none.')
@secure()
param releaseSasToken string = ''

@description('Download the release as this VM\'s agent identity (it needs Storage Blob Data Reader on the release\'s container).')
param releaseWithAgentIdentity bool = false

@description('Your private index (pip --index-url): where the wheel\'s dependencies (or packageSpec) come from; empty: pip\'s default index.')
param packageIndexUrl string = ''

@description('A pinned requirement installed from packageIndexUrl instead of the wheel, e.g. se-forwarder[eventhubs,queue]==0.1.0; empty: the wheel.')
param packageSpec string = ''

@description('Any new value re-runs the installer (e.g. after changing the verify keys, which it cannot see).')
param runTag string = ''

@description('Logs ingestion URL of the data collection endpoint; empty: no Azure Monitor Logs sink.')
param logsIngestionEndpoint string = ''

@description('Immutable ID of the data collection rule (with logsIngestionEndpoint).')
param logsRuleId string = ''

@description('Stream of the data collection rule (with logsIngestionEndpoint).')
param logsStream string = ''

var linuxStateDir = '/var/lib/se-forwarder'
var windowsStateDir = 'C:/ProgramData/se-forwarder/state'
var configTemplate = loadTextContent('../agent-config.toml')
var config1 = replace(configTemplate, '@@VM_NAME@@', vmName)
var config2 = replace(config1, '@@STATE_DIR@@', osType == 'Linux' ? linuxStateDir : windowsStateDir)
var config3 = replace(config2, '@@EVENTHUBS_NAMESPACE@@', eventHubsNamespace)
var config4 = replace(config3, '@@EVENTHUB@@', eventHubName)
var config5 = replace(config4, '@@DRY_RUN@@', approvalsDryRun ? 'true' : 'false') // string() gives 'True'
var config6 = replace(config5, '@@QUEUE_ACCOUNT_URL@@', queueEndpoint)
var config6b = replace(config6, '@@COORDINATOR_ONLY@@', coordinatorOnly ? 'true' : 'false')
var config7 = replace(config6b, '@@TAG_NAMES@@', string(tagNames)) // a JSON array of strings is a TOML array
// Optional Azure Monitor Logs sink, appended (a [[sinks]] table may come after the others).
var logsTemplate = loadTextContent('../agent-config-logs.toml')
var logs1 = replace(logsTemplate, '@@LOGS_ENDPOINT@@', logsIngestionEndpoint)
var logs2 = replace(logs1, '@@LOGS_RULE_ID@@', logsRuleId)
var logsConfig = empty(logsIngestionEndpoint) ? '' : replace(logs2, '@@LOGS_STREAM@@', logsStream)
var config = replace('${config7}${logsConfig}', '@@CLIENT_ID@@', agent.properties.clientId)
// The agent's environment (the verify keys; any secret added later) reaches it as a file only root or
// SYSTEM can read on the VM, never on a command line: on Linux inside the script, on Windows as the protected setting
// seForwarderEnv, which install.ps1 decrypts itself (-EnvFromExtension).
var agentEnvironment = 'APPROVALS_PUBLIC_KEYS=${approvalVerifyKeys}\n'
var scriptTemplate = loadTextContent('../../deploy/vm-extension/linux-extension.sh')
var script1 = replace(scriptTemplate, '@@CONFIG_B64@@', base64(config))
var script2 = replace(script1, '@@ENV_B64@@', base64(agentEnvironment))
var script3 = replace(script2, '@@SUMS_B64@@', base64(releaseSums))
var script4 = replace(script3, '@@WHEEL@@', wheelFile)
var script5 = replace(script4, '@@INDEX_URL@@', packageIndexUrl)
var script6a = replace(script5, '@@EXTRAS@@', extras)
var script6 = replace(script6a, '@@BASE_URI@@', '') // the extension downloads (fileUris)
var linuxScript = replace(script6, '@@PACKAGE_SPEC@@', packageSpec)
// The wheel's extras: the Logs sink needs logs-ingestion (a packageSpec names its own).
var extras = empty(logsIngestionEndpoint) ? 'eventhubs,queue' : 'eventhubs,queue,logs-ingestion'
var sas = empty(releaseSasToken) ? '' : '?${releaseSasToken}'
var wheelUris = empty(packageSpec) ? [
  '${installerBaseUri}/${wheelFile}${sas}'
] : []
// The wheel's line of SHA256SUMS, for install.ps1 -Sha256 (Windows has no sums check of its own).
// (sha256sum's lines: 64 hex digits, two spaces, the path).
var wheelDigest = empty(packageSpec) ? substring(releaseSums, indexOf(releaseSums, '  ${wheelFile}') - 64, 64) : ''
var windowsIndex = empty(packageIndexUrl) ? '' : ' -IndexUrl ${packageIndexUrl}'
var windowsSource = empty(packageSpec) ? '-Wheel ${wheelFile} -Sha256 ${wheelDigest} -Extras ${extras}${windowsIndex}' : '-PackageSpec "${packageSpec}"${windowsIndex}'
var windowsCommand = 'powershell.exe -NoProfile -NonInteractive -ExecutionPolicy Bypass -File install.ps1 ${windowsSource} -ConfigBase64 ${base64(config)} -EnvFromExtension'
var downloadIdentity = releaseWithAgentIdentity ? {
  managedIdentity: {
    clientId: agent.properties.clientId
  }
} : {}
// Re-run the extension whenever what it installs changes (protected settings alone do not trigger
// it): the config, the release, and the verify keys, so that a rotated key reaches every VM.
var updateTag = uniqueString(config, releaseSums, wheelFile, packageSpec, packageIndexUrl, installerBaseUri, approvalVerifyKeys, runTag)

resource existingVm 'Microsoft.Compute/virtualMachines@2024-03-01' existing = {
  name: vmName
}

resource agent 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' = {
  name: identityName
  location: location
  tags: tags
}

var agentIdentityId = agent.id

// Read in any case: the VM's vmId names its queue.
module current 'vm-identity.bicep' = {
  name: take('se-forwarder-identity-${vmName}', 64)
  params: {
    vmName: vmName
  }
}

// The merge: the system-assigned identity kept if the VM has one, the agent's identity added to
// the user-assigned ones it has.
var keepsSystemAssigned = attachIdentity && contains(current.outputs.identityType, 'SystemAssigned')
var mergedIdentityType = keepsSystemAssigned ? 'SystemAssigned, UserAssigned' : 'UserAssigned'

resource vm 'Microsoft.Compute/virtualMachines@2024-03-01' = if (attachIdentity) {
  // This PUT of an existing VM carries only its identity; the Compute resource provider keeps the
  // VM's other properties, which this template neither sets nor weakens. Checks about those:
  // checkov:skip=CKV_AZURE_1: OS profile (SSH keys vs passwords) of an existing VM is not managed here.
  // checkov:skip=CKV_AZURE_178: OS profile (SSH keys) of an existing VM is not managed here.
  // checkov:skip=CKV_AZURE_149: OS profile (password authentication) of an existing VM is not managed here.
  // checkov:skip=CKV_AZURE_151: disk encryption of an existing VM is not managed here.
  // checkov:skip=CKV_AZURE_97: security profile (encryption at host) of an existing VM is not managed here.
  // checkov:skip=CKV_AZURE_50: installing the agent through the Custom Script Extension is this template's purpose; the extension runs only the project's installer, its inputs in protected settings.
  name: vmName
  location: existingVm.location
  identity: {
    type: mergedIdentityType
    userAssignedIdentities: union(current.outputs.userAssignedIdentities, {
      '${agentIdentityId}': {}
    })
  }
}

resource linuxInstaller 'Microsoft.Compute/virtualMachines/extensions@2024-03-01' = if (osType == 'Linux' && installAgent) {
  parent: existingVm
  name: 'se-forwarder'
  location: existingVm.location
  dependsOn: [
    vm
  ]
  properties: {
    publisher: 'Microsoft.Azure.Extensions'
    type: 'CustomScript'
    typeHandlerVersion: '2.1'
    autoUpgradeMinorVersion: true
    forceUpdateTag: updateTag
    settings: {}
    protectedSettings: union({
      fileUris: concat([
        '${installerBaseUri}/linux/install.sh${sas}'
        '${installerBaseUri}/linux/se-forwarder.service${sas}'
        '${installerBaseUri}/linux/10-restart-backoff.conf${sas}'
      ], wheelUris)
      script: base64(linuxScript)
    }, downloadIdentity)
  }
}

resource windowsInstaller 'Microsoft.Compute/virtualMachines/extensions@2024-03-01' = if (osType == 'Windows' && installAgent) {
  parent: existingVm
  name: 'se-forwarder'
  location: existingVm.location
  dependsOn: [
    vm
  ]
  properties: {
    publisher: 'Microsoft.Compute'
    type: 'CustomScriptExtension'
    typeHandlerVersion: '1.10'
    autoUpgradeMinorVersion: true
    forceUpdateTag: updateTag
    settings: {}
    protectedSettings: union({
      fileUris: concat([
        '${installerBaseUri}/windows/install.ps1${sas}'
      ], wheelUris)
      commandToExecute: windowsCommand
      seForwarderEnv: base64(agentEnvironment)
    }, downloadIdentity)
  }
}

@description('The VM\'s vmId (its queue is se-approvals-<vmId>).')
output vmId string = current.outputs.vmId

@description('Principal ID of the agent identity.')
output principalId string = agent.properties.principalId

@description('Client ID of the agent identity.')
output clientId string = agent.properties.clientId

@description('Resource ID of the agent identity.')
output identityId string = agent.id
