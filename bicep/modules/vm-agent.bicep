// One VM: attach its agent identity and install the agent with the Custom Script Extension, with a
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

@description('Resource ID of this VM\'s agent identity.')
param agentIdentityId string

@description('Client ID of this VM\'s agent identity.')
param agentClientId string

@description('Event Hubs namespace host name.')
param eventHubsNamespace string

@description('Event hub name.')
param eventHubName string

@description('Queue service endpoint (https://acct.queue.core.windows.net).')
param queueEndpoint string

@description('This VM\'s approval queue.')
param queueName string

@description('The coordinator\'s Ed25519 public key(s) (base64, comma-separated) that approval messages must verify with.')
param approvalVerifyKeys string

@description('true: the agent never approves, it only reports.')
param approvalsDryRun bool = false

@description('Base URL of the deploy/ folder of a se-forwarder release (holds linux/install.sh, linux/se-forwarder.service, windows/install.ps1).')
param installerBaseUri string

@description('pip requirement the installers install.')
param packageSpec string

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
var config7 = replace(config6, '@@QUEUE@@', queueName)
// Optional Azure Monitor Logs sink, appended (a [[sinks]] table may come after the others).
var logsTemplate = loadTextContent('../agent-config-logs.toml')
var logs1 = replace(logsTemplate, '@@LOGS_ENDPOINT@@', logsIngestionEndpoint)
var logs2 = replace(logs1, '@@LOGS_RULE_ID@@', logsRuleId)
var logsConfig = empty(logsIngestionEndpoint) ? '' : replace(logs2, '@@LOGS_STREAM@@', logsStream)
var config = replace('${config7}${logsConfig}', '@@CLIENT_ID@@', agentClientId)
// The agent's environment (the verify keys; any secret added later) reaches it as a file only root or
// SYSTEM can read on the VM, never on a command line: on Linux inside the script, on Windows as the protected setting
// seForwarderEnv, which install.ps1 decrypts itself (-EnvFromExtension).
var agentEnvironment = 'APPROVALS_PUBLIC_KEYS=${approvalVerifyKeys}\n'
var scriptTemplate = loadTextContent('../../deploy/vm-extension/linux-extension.sh')
var script1 = replace(scriptTemplate, '@@CONFIG_B64@@', base64(config))
var script2 = replace(script1, '@@ENV_B64@@', base64(agentEnvironment))
var linuxScript = replace(script2, '@@PACKAGE_SPEC@@', packageSpec)
var windowsCommand = 'powershell.exe -NoProfile -NonInteractive -ExecutionPolicy Bypass -File install.ps1 -PackageSpec "${packageSpec}" -ConfigBase64 ${base64(config)} -EnvFromExtension'
// Re-run the extension whenever what it installs changes (protected settings alone do not trigger it).
var updateTag = uniqueString(config, packageSpec, installerBaseUri, runTag)

resource existingVm 'Microsoft.Compute/virtualMachines@2024-03-01' existing = {
  name: vmName
}

module current 'vm-identity.bicep' = if (attachIdentity) {
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

resource linuxInstaller 'Microsoft.Compute/virtualMachines/extensions@2024-03-01' = if (osType == 'Linux') {
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
    protectedSettings: {
      fileUris: [
        '${installerBaseUri}/linux/install.sh'
        '${installerBaseUri}/linux/se-forwarder.service'
        '${installerBaseUri}/linux/10-restart-backoff.conf'
      ]
      script: base64(linuxScript)
    }
  }
}

resource windowsInstaller 'Microsoft.Compute/virtualMachines/extensions@2024-03-01' = if (osType == 'Windows') {
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
    protectedSettings: {
      fileUris: [
        '${installerBaseUri}/windows/install.ps1'
      ]
      commandToExecute: windowsCommand
      seForwarderEnv: base64(agentEnvironment)
    }
  }
}
