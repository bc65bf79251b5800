<#
.SYNOPSIS
    Install, upgrade or remove the se-forwarder agent on Windows.

.DESCRIPTION
    Lays down:
      $InstallDir\venv            Python venv with the se-forwarder package (default C:\Program Files\se-forwarder)
      $InstallDir\run-agent.ps1   the supervisor the scheduled task starts (see below)
      $DataDir\config.toml        configuration (written only if absent, or from -ConfigFile/-ConfigBase64)
      $DataDir\se-forwarder.env   secrets as KEY=VALUE lines, readable only by SYSTEM, Administrators
                                  and the agent's account
    Secrets never travel on a command line (which process listings, process-creation auditing and
    the extension's own logs record): -EnvFile names a file, and -EnvFromExtension reads them from
    the protected settings of the Custom Script Extension that runs this script (the key
    seForwarderEnv, base64 of the environment file), which only this machine can decrypt.
      $DataDir\state              the agent's state (outbox, cursors); $DataDir\logs its log
    and registers the scheduled task "se-forwarder".

    Why a scheduled task and not a Windows service: se-forwarder is a console program; a Windows
    service must answer the Service Control Manager, which needs a wrapper binary (WinSW, NSSM) or
    pywin32 code in the agent. A scheduled task needs neither: it starts at boot, runs without a
    logged-on user as LOCAL SERVICE (no administrator rights, network access as the machine), is
    restarted by Task Scheduler if it fails to start, and run-agent.ps1 restarts the agent with
    backoff whenever it exits with an error. The cost: stopping the task kills the agent instead of
    asking it to stop (Windows has no SIGTERM for console programs without a console). The agent's
    outbox makes that safe: delivery is at-least-once with stable CloudEvent ids, so a killed agent
    resends at most what it had not yet confirmed.

    LOCAL SERVICE is shared with some Windows services, which could in principle read the
    environment file too. Hooks run with this account's rights: if a hook needs more (draining a
    node, stopping a service), run the task as a dedicated account instead (Set-ScheduledTask) and
    grant that account read access to $DataDir and modify access to $DataDir\state and \logs.

    Idempotent: a second run with the same arguments changes nothing and does not restart the agent.
    NOT TESTED on this project's CI (Linux only); see the README.

    What is installed is always a pinned artifact: -Wheel with -Sha256 (a release's SHA256SUMS, from
    scripts/release), or -PackageSpec from the private index -IndexUrl (or the wheelhouse
    -FindLinks); a bare name is never resolved on the public index, where anyone may publish it.

.EXAMPLE
    powershell -ExecutionPolicy Bypass -File install.ps1 -Wheel .\se_forwarder-0.1.0-py3-none-any.whl -Sha256 <hex> -ConfigFile .\config.toml
.EXAMPLE
    powershell -ExecutionPolicy Bypass -File install.ps1 -Uninstall -Purge
#>
[CmdletBinding()]
param(
    # pip requirement to install, only from -IndexUrl (your private index) or -FindLinks; -IndexUrl
    # alone: where the wheel's dependencies come from.
    [string] $PackageSpec = '',
    [string] $IndexUrl = '',
    # Install this wheel (with the extras of -Extras); -Sha256 is the release's SHA256SUMS line for
    # it: a wheel that does not match is refused.
    [string] $Wheel = '',
    [string] $Sha256 = '',
    [string] $Extras = 'eventhubs,queue',
    # Install offline from this wheelhouse only (pip --no-index --find-links).
    [string] $FindLinks = '',
    # Python >= 3.11 to build the venv with; default: an installed 3.11+, else one installed from
    # $PythonInstallerUri (its Authenticode signature is checked before it runs).
    [string] $Python = '',
    [string] $PythonInstallerUri = 'https://www.python.org/ftp/python/3.11.9/python-3.11.9-amd64.exe',
    # Configuration to install (replaces a different existing one, which is kept as config.toml.bak).
    [string] $ConfigFile = '',
    [string] $ConfigBase64 = '',
    # Environment file (secrets) to install; or, when the Custom Script Extension runs this script,
    # -EnvFromExtension: from its protected settings (seForwarderEnv). Never on the command line.
    [string] $EnvFile = '',
    [switch] $EnvFromExtension,
    [string] $InstallDir = (Join-Path $env:ProgramFiles 'se-forwarder'),
    [string] $DataDir = (Join-Path $env:ProgramData 'se-forwarder'),
    # Install and register, but do not start the agent.
    [switch] $NoStart,
    # Print what would change and change nothing.
    [switch] $DryRun,
    # Remove the task, the venv and run-agent.ps1; keep config, state and logs ...
    [switch] $Uninstall,
    # ... unless -Purge is given too.
    [switch] $Purge
)

Set-StrictMode -Version 3.0
$ErrorActionPreference = 'Stop'
$ProgressPreference = 'SilentlyContinue'

$TaskName = 'se-forwarder'
# Well-known SIDs, so that the script also works where account names are localized.
$SystemSid = 'S-1-5-18'
$AdministratorsSid = 'S-1-5-32-544'
$LocalServiceSid = 'S-1-5-19'
$TaskAccount = (New-Object Security.Principal.SecurityIdentifier($LocalServiceSid)).Translate(
    [Security.Principal.NTAccount]).Value
$Venv = Join-Path $InstallDir 'venv'
$Runner = Join-Path $InstallDir 'run-agent.ps1'
$ConfigPath = Join-Path $DataDir 'config.toml'
$EnvPath = Join-Path $DataDir 'se-forwarder.env'
$StateDir = Join-Path $DataDir 'state'
$LogsDir = Join-Path $DataDir 'logs'
$Stamp = Join-Path $Venv '.se-forwarder-install'
$script:Changed = $false

# Messages go to the host (stdout of powershell.exe, which the Custom Script Extension records), never
# into the pipeline, so functions return only what they return.
function Say([string] $Message) { Write-Host "install.ps1: $Message" }
function Fail([string] $Message) { [Console]::Error.WriteLine("install.ps1: error: $Message"); exit 1 }

# Run a changing action, or only describe it with -DryRun; either way the run counts as changing.
function Invoke-Change([string] $What, [scriptblock] $Action) {
    $script:Changed = $true
    if ($DryRun) { Say "would $What"; return }
    Say $What
    & $Action
}

function Test-Administrator {
    $identity = [Security.Principal.WindowsIdentity]::GetCurrent()
    return (New-Object Security.Principal.WindowsPrincipal($identity)).IsInRole(
        [Security.Principal.WindowsBuiltInRole]::Administrator)
}

# Write bytes to a file unless it already has exactly these bytes.
function Set-FileContent([string] $Path, [byte[]] $Bytes, [switch] $Backup) {
    if (Test-Path -LiteralPath $Path -PathType Leaf) {
        $current = [IO.File]::ReadAllBytes($Path)
        if ([Convert]::ToBase64String($current) -eq [Convert]::ToBase64String($Bytes)) { return }
        if ($Backup) {
            Invoke-Change "keep the previous $Path as $Path.bak" { Copy-Item -LiteralPath $Path -Destination "$Path.bak" -Force }
        }
    }
    Invoke-Change "write $Path" { [IO.File]::WriteAllBytes($Path, $Bytes) }
}

function New-Directory([string] $Path) {
    if (-not (Test-Path -LiteralPath $Path -PathType Container)) {
        Invoke-Change "create $Path" { New-Item -ItemType Directory -Path $Path -Force | Out-Null }
    }
}

# An ACL as comparable text: protection flag and the sorted explicit and inherited rules, by SID.
function Get-AclKey($Acl) {
    $rules = @($Acl.GetAccessRules($true, $true, [Security.Principal.SecurityIdentifier]) | ForEach-Object {
        '{0}|{1}|{2}|{3}|{4}|{5}' -f $_.IdentityReference.Value, [int] $_.FileSystemRights,
            [int] $_.InheritanceFlags, [int] $_.PropagationFlags, $_.AccessControlType, $_.IsInherited
    } | Sort-Object)
    return "$($Acl.AreAccessRulesProtected);$($rules -join ';')"
}

# Replace a path's ACL (no inheritance) with: SYSTEM and Administrators full control, plus the
# agent's account with the given rights. Returns quietly when the ACL is already exactly that.
function Set-PrivateAcl([string] $Path, [string] $AgentRights, [switch] $Container) {
    if ($DryRun -and -not (Test-Path -LiteralPath $Path)) { return }
    $inherit = if ($Container) { 'ContainerInherit, ObjectInherit' } else { 'None' }
    $acl = New-Object Security.AccessControl.DirectorySecurity
    if (-not $Container) { $acl = New-Object Security.AccessControl.FileSecurity }
    $acl.SetAccessRuleProtection($true, $false)
    $rights = [ordered] @{ $SystemSid = 'FullControl'; $AdministratorsSid = 'FullControl'; $LocalServiceSid = $AgentRights }
    foreach ($sid in $rights.Keys) {
        $acl.AddAccessRule((New-Object Security.AccessControl.FileSystemAccessRule(
            (New-Object Security.Principal.SecurityIdentifier($sid)),
            [Security.AccessControl.FileSystemRights] $rights[$sid],
            [Security.AccessControl.InheritanceFlags] $inherit,
            [Security.AccessControl.PropagationFlags] 'None',
            [Security.AccessControl.AccessControlType] 'Allow')))
    }
    if ((Get-AclKey (Get-Acl -LiteralPath $Path)) -eq (Get-AclKey $acl)) { return }
    Invoke-Change "restrict access to $Path" { Set-Acl -LiteralPath $Path -AclObject $acl }
}

function Get-PythonVersionOk([string] $Exe) {
    try {
        & $Exe -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>$null | Out-Null
        return ($LASTEXITCODE -eq 0)
    } catch { return $false }
}

function Find-Python {
    if ($Python) {
        if (-not (Get-PythonVersionOk $Python)) { Fail "$Python is not Python >= 3.11" }
        return $Python
    }
    $candidates = @()
    foreach ($version in @('3.13', '3.12', '3.11')) {
        $short = $version.Replace('.', '')
        $candidates += (Join-Path $env:ProgramFiles "Python$short\python.exe")
        foreach ($hive in @('HKLM:\SOFTWARE\Python\PythonCore', 'HKLM:\SOFTWARE\WOW6432Node\Python\PythonCore')) {
            $key = Join-Path $hive "$version\InstallPath"
            if (Test-Path $key) {
                $path = (Get-ItemProperty -Path $key -ErrorAction SilentlyContinue).'(default)'
                if ($path) { $candidates += (Join-Path $path 'python.exe') }
            }
        }
    }
    foreach ($candidate in $candidates) {
        if ((Test-Path -LiteralPath $candidate) -and (Get-PythonVersionOk $candidate)) { return $candidate }
    }
    return $null
}

function Install-Python {
    $target = Join-Path $env:ProgramFiles 'Python311'
    $installer = Join-Path $env:TEMP 'se-forwarder-python-installer.exe'
    Invoke-Change "download Python from $PythonInstallerUri" {
        [Net.ServicePointManager]::SecurityProtocol = [Net.SecurityProtocolType]::Tls12
        Invoke-WebRequest -UseBasicParsing -Uri $PythonInstallerUri -OutFile $installer
        $signature = Get-AuthenticodeSignature -FilePath $installer
        if ($signature.Status -ne 'Valid' -or $signature.SignerCertificate.Subject -notmatch 'Python Software Foundation') {
            Remove-Item -LiteralPath $installer -Force
            Fail "the Python installer from $PythonInstallerUri is not signed by the Python Software Foundation"
        }
    }
    Invoke-Change "install Python into $target (all users, not on PATH)" {
        $arguments = @('/quiet', 'InstallAllUsers=1', 'PrependPath=0', 'Include_launcher=0',
            'Include_test=0', 'Include_doc=0', 'Include_tcltk=0', "TargetDir=`"$target`"")
        $process = Start-Process -FilePath $installer -ArgumentList $arguments -Wait -PassThru
        Remove-Item -LiteralPath $installer -Force
        if ($process.ExitCode -ne 0) { Fail "the Python installer failed with exit code $($process.ExitCode)" }
    }
    return (Join-Path $target 'python.exe')
}

# What pip is asked to install, as one line, recorded in the venv so that a repeat run skips pip.
function Get-InstallRequest {
    if ($Wheel) {
        $hash = (Get-FileHash -LiteralPath $Wheel -Algorithm SHA256).Hash
        return "$Wheel extras=$Extras sha256=$hash find_links=$FindLinks"
    }
    return "$PackageSpec index=$($IndexUrl -replace '\?.*$', '') find_links=$FindLinks"
}

# The supervisor, the venv's launchers and the base interpreter they start (its command line names
# the venv), except this script itself.
function Get-AgentProcesses {
    return @(Get-CimInstance -ClassName Win32_Process -ErrorAction SilentlyContinue | Where-Object {
        $_.ProcessId -ne $PID -and $_.CommandLine -and (
            $_.CommandLine.IndexOf($Venv, [StringComparison]::OrdinalIgnoreCase) -ge 0 -or
            $_.CommandLine.IndexOf($Runner, [StringComparison]::OrdinalIgnoreCase) -ge 0)
    })
}

function Stop-Agent {
    $task = Get-ScheduledTask -TaskName $TaskName -ErrorAction SilentlyContinue
    if ($task -and $task.State -eq 'Running') {
        Invoke-Change "stop the task $TaskName" { Stop-ScheduledTask -TaskName $TaskName }
    }
    # run-agent.ps1 ties the agent to itself with a job object; this catches anything left over.
    $agents = @(Get-AgentProcesses)
    if ($agents.Count -gt 0) {
        Invoke-Change "stop $($agents.Count) agent process(es)" {
            foreach ($process in $agents) { Stop-Process -Id $process.ProcessId -Force -ErrorAction SilentlyContinue }
        }
    }
}

function Install-Venv {
    $venvPython = Join-Path $Venv 'Scripts\python.exe'
    $agentExe = Join-Path $Venv 'Scripts\se-forwarder.exe'
    $request = Get-InstallRequest
    $upToDate = (Test-Path -LiteralPath $Stamp) -and (Test-Path -LiteralPath $agentExe) -and
        ((Get-Content -LiteralPath $Stamp -Raw).Trim() -eq $request)
    if ($upToDate) { return }
    if (-not (Test-Path -LiteralPath $venvPython)) {
        $base = Find-Python
        if (-not $base) { $base = Install-Python }
        Invoke-Change "create the venv $Venv" {
            & $base -m venv $Venv
            if ($LASTEXITCODE -ne 0) { Fail "creating the venv failed" }
        }
    }
    Stop-Agent  # Windows locks se-forwarder.exe while it runs; pip could not replace it.
    $pipArgs = @('-m', 'pip', 'install', '--disable-pip-version-check', '--no-input', '--quiet', '--upgrade')
    if ($FindLinks) { $pipArgs += @('--no-index', '--find-links', $FindLinks) }
    if ($IndexUrl) { $pipArgs += @('--index-url', $IndexUrl) }
    if ($Wheel) {
        $uri = ([Uri] (Resolve-Path -LiteralPath $Wheel).Path).AbsoluteUri
        if ($Extras) { $pipArgs += "se-forwarder[$Extras] @ $uri" } else { $pipArgs += $Wheel }
    } else {
        $pipArgs += $PackageSpec
    }
    $shown = ($pipArgs[2..($pipArgs.Count - 1)] -join ' ')
    if ($IndexUrl) { $shown = $shown.Replace($IndexUrl, ($IndexUrl -replace '\?.*$', '')) }  # no token printed
    Invoke-Change "pip $shown" {
        & $venvPython @pipArgs
        if ($LASTEXITCODE -ne 0) { Fail "pip install failed" }
        if (-not (Test-Path -LiteralPath $agentExe)) { Fail "pip did not install $agentExe" }
        Set-Content -LiteralPath $Stamp -Value $request -Encoding UTF8
    }
}

function Get-DefaultConfig {
    return @'
# se-forwarder configuration (written by install.ps1 because none existed).
# Secrets never go here: name an environment variable (*_env keys) set in
# C:\ProgramData\se-forwarder\se-forwarder.env, or a file (*_file keys).

[imds]
url = "http://169.254.169.254"
poll_interval = 1.0

[state]
dir = "C:/ProgramData/se-forwarder/state"

# Until a real sink is configured, CloudEvents go to the agent's log
# (C:\ProgramData\se-forwarder\logs\agent.log).
[[sinks]]
type = "stdout"

[approvals]
# Observe only: a fresh install never approves an event early.
dry_run = true

[telemetry]
log_format = "json"
'@
}

# The supervisor started by the task: loads the environment file, runs the agent, restarts it with
# backoff when it fails, and stops when it exits 0 (a deliberate stop).
function Get-RunnerScript {
    return @'
# Started by the scheduled task "se-forwarder" (written by install.ps1; changes are overwritten).
$ErrorActionPreference = 'Continue'
$dataDir = Join-Path $env:ProgramData 'se-forwarder'
$envFile = Join-Path $dataDir 'se-forwarder.env'
$config = Join-Path $dataDir 'config.toml'
$logDir = Join-Path $dataDir 'logs'
$log = Join-Path $logDir 'agent.log'
$agent = Join-Path $PSScriptRoot 'venv\Scripts\se-forwarder.exe'

# Put this process in a job object that kills its members when its last handle closes: when Task
# Scheduler ends the task (it terminates this process only), the agent and its hooks die with it
# instead of running on unsupervised.
try {
    Add-Type -TypeDefinition @"
using System;
using System.Runtime.InteropServices;
public static class SeForwarderJob {
    [StructLayout(LayoutKind.Sequential)]
    struct BasicLimit {
        public long PerProcessUserTimeLimit; public long PerJobUserTimeLimit; public uint LimitFlags;
        public UIntPtr MinimumWorkingSetSize; public UIntPtr MaximumWorkingSetSize;
        public uint ActiveProcessLimit; public UIntPtr Affinity; public uint PriorityClass;
        public uint SchedulingClass;
    }
    [StructLayout(LayoutKind.Sequential)]
    struct IoCounters { public ulong R, W, O, RB, WB, OB; }
    [StructLayout(LayoutKind.Sequential)]
    struct ExtendedLimit {
        public BasicLimit Basic; public IoCounters Io; public UIntPtr ProcessMemoryLimit;
        public UIntPtr JobMemoryLimit; public UIntPtr PeakProcessMemoryUsed; public UIntPtr PeakJobMemoryUsed;
    }
    [DllImport("kernel32.dll", SetLastError = true)]
    static extern IntPtr CreateJobObject(IntPtr attributes, string name);
    [DllImport("kernel32.dll", SetLastError = true)]
    static extern bool SetInformationJobObject(IntPtr job, int infoClass, ref ExtendedLimit info, uint size);
    [DllImport("kernel32.dll", SetLastError = true)]
    static extern bool AssignProcessToJobObject(IntPtr job, IntPtr process);
    [DllImport("kernel32.dll")]
    static extern IntPtr GetCurrentProcess();
    public static bool KillChildrenWithMe() {
        IntPtr job = CreateJobObject(IntPtr.Zero, null);
        if (job == IntPtr.Zero) return false;
        var info = new ExtendedLimit();
        info.Basic.LimitFlags = 0x2000; // JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
        if (!SetInformationJobObject(job, 9, ref info, (uint) Marshal.SizeOf(typeof(ExtendedLimit)))) return false;
        return AssignProcessToJobObject(job, GetCurrentProcess());
    }
}
"@
    $tied = [SeForwarderJob]::KillChildrenWithMe()
} catch { $tied = $false }
if (-not $tied) {
    New-Item -ItemType Directory -Path $logDir -Force | Out-Null
    "$(Get-Date -Format o) could not create the job object; a stopped task may leave the agent running" |
        Out-File -FilePath $log -Append -Encoding utf8
}
if (Test-Path -LiteralPath $envFile) {
    foreach ($line in Get-Content -LiteralPath $envFile) {
        $text = $line.Trim()
        if ($text -eq '' -or $text.StartsWith('#')) { continue }
        $eq = $text.IndexOf('=')
        if ($eq -lt 1) { continue }
        $value = $text.Substring($eq + 1).Trim()
        if ($value.Length -ge 2 -and $value[0] -eq $value[-1] -and ($value[0] -eq '"' -or $value[0] -eq "'")) {
            $value = $value.Substring(1, $value.Length - 2)
        }
        [Environment]::SetEnvironmentVariable($text.Substring(0, $eq).Trim(), $value, 'Process')
    }
}
$env:PYTHONUNBUFFERED = '1'
$env:PYTHONDONTWRITEBYTECODE = '1'
$delay = 5
while ($true) {
    if ((Test-Path -LiteralPath $log) -and (Get-Item -LiteralPath $log).Length -gt 20MB) {
        Move-Item -LiteralPath $log -Destination "$log.1" -Force
    }
    $started = Get-Date
    & $agent run --config $config 2>&1 | ForEach-Object { "$_" } | Out-File -FilePath $log -Append -Encoding utf8
    $code = $LASTEXITCODE
    if ($code -eq 0) { exit 0 }
    "$(Get-Date -Format o) se-forwarder exited with $code; restarting in $delay s" |
        Out-File -FilePath $log -Append -Encoding utf8
    Start-Sleep -Seconds $delay
    if (((Get-Date) - $started).TotalMinutes -gt 10) { $delay = 5 } else { $delay = [Math]::Min($delay * 2, 300) }
}
'@
}

# The environment file's bytes from the protected settings of the Custom Script Extension running
# this script. The extension runs it from ...\<handler>\Downloads\<n> and leaves its settings in
# ...\<handler>\RuntimeSettings\<n>.settings, the protected part encrypted (CMS) to a certificate in
# the machine's store that only SYSTEM and Administrators can use.
function Get-ExtensionEnvironment {
    $sequence = Split-Path -Leaf $PSScriptRoot
    $handler = Split-Path -Parent (Split-Path -Parent $PSScriptRoot)
    $settingsFile = Join-Path $handler "RuntimeSettings\$sequence.settings"
    if (-not (Test-Path -LiteralPath $settingsFile -PathType Leaf)) {
        Fail "-EnvFromExtension: $settingsFile not found (only the Custom Script Extension can run install.ps1 with it; use -EnvFile)"
    }
    $handlerSettings = (Get-Content -LiteralPath $settingsFile -Raw | ConvertFrom-Json).runtimeSettings[0].handlerSettings
    $names = @($handlerSettings.PSObject.Properties.Name)
    if ($names -notcontains 'protectedSettings' -or -not $handlerSettings.protectedSettings) {
        Fail "-EnvFromExtension: the extension has no protected settings"
    }
    Add-Type -AssemblyName System.Security
    $store = New-Object Security.Cryptography.X509Certificates.X509Store('My', 'LocalMachine')
    $store.Open('ReadOnly')
    try {
        $certificates = $store.Certificates.Find('FindByThumbprint', $handlerSettings.protectedSettingsCertThumbprint, $false)
        $cms = New-Object Security.Cryptography.Pkcs.EnvelopedCms
        $cms.Decode([Convert]::FromBase64String($handlerSettings.protectedSettings))
        $cms.Decrypt($certificates)
    } finally {
        $store.Close()
    }
    $protected = [Text.Encoding]::UTF8.GetString($cms.ContentInfo.Content) | ConvertFrom-Json
    if (@($protected.PSObject.Properties.Name) -notcontains 'seForwarderEnv') {
        Fail "-EnvFromExtension: the protected settings have no seForwarderEnv"
    }
    return [Convert]::FromBase64String($protected.seForwarderEnv)
}

function Install-Config {
    New-Directory $DataDir
    New-Directory $StateDir
    New-Directory $LogsDir
    Set-PrivateAcl $DataDir 'ReadAndExecute' -Container
    Set-PrivateAcl $StateDir 'Modify' -Container
    Set-PrivateAcl $LogsDir 'Modify' -Container
    $utf8 = New-Object Text.UTF8Encoding($false)
    if ($ConfigBase64) {
        Set-FileContent $ConfigPath ([Convert]::FromBase64String($ConfigBase64)) -Backup
    } elseif ($ConfigFile) {
        if (-not (Test-Path -LiteralPath $ConfigFile -PathType Leaf)) { Fail "config file $ConfigFile does not exist" }
        Set-FileContent $ConfigPath ([IO.File]::ReadAllBytes((Resolve-Path -LiteralPath $ConfigFile).Path)) -Backup
    } elseif (-not (Test-Path -LiteralPath $ConfigPath)) {
        Set-FileContent $ConfigPath ($utf8.GetBytes((Get-DefaultConfig) -replace "`r`n", "`n"))
    }
    if ($EnvFromExtension) {
        Set-FileContent $EnvPath (Get-ExtensionEnvironment)
    } elseif ($EnvFile) {
        if (-not (Test-Path -LiteralPath $EnvFile -PathType Leaf)) { Fail "environment file $EnvFile does not exist" }
        Set-FileContent $EnvPath ([IO.File]::ReadAllBytes((Resolve-Path -LiteralPath $EnvFile).Path))
    }
    if (Test-Path -LiteralPath $EnvPath) { Set-PrivateAcl $EnvPath 'Read' }
}

function Install-Task {
    $utf8 = New-Object Text.UTF8Encoding($true)  # PowerShell 5.1 reads BOM-less scripts as ANSI
    Set-FileContent $Runner ([byte[]] ($utf8.GetPreamble() + $utf8.GetBytes((Get-RunnerScript))))
    $arguments = "-NoProfile -NonInteractive -ExecutionPolicy Bypass -File `"$Runner`""
    $existing = Get-ScheduledTask -TaskName $TaskName -ErrorAction SilentlyContinue
    $accountName = $TaskAccount.Split('\')[-1]
    $same = $existing -and $existing.Actions.Count -eq 1 -and $existing.Actions[0].Arguments -eq $arguments -and
        $existing.Principal.UserId -like "*$accountName"
    if (-not $same) {
        Invoke-Change "register the scheduled task $TaskName (at startup, as $TaskAccount)" {
            $action = New-ScheduledTaskAction -Execute "$env:SystemRoot\System32\WindowsPowerShell\v1.0\powershell.exe" -Argument $arguments
            $trigger = New-ScheduledTaskTrigger -AtStartup
            $principal = New-ScheduledTaskPrincipal -UserId $TaskAccount -LogonType ServiceAccount -RunLevel Limited
            $settings = New-ScheduledTaskSettingsSet -AllowStartIfOnBatteries -DontStopIfGoingOnBatteries `
                -StartWhenAvailable -ExecutionTimeLimit ([TimeSpan]::Zero) -RestartCount 999 `
                -RestartInterval (New-TimeSpan -Minutes 1) -MultipleInstances IgnoreNew
            Register-ScheduledTask -TaskName $TaskName -Action $action -Trigger $trigger -Principal $principal `
                -Settings $settings -Description 'se-forwarder: Azure Scheduled Events to CloudEvents' -Force | Out-Null
        }
    }
}

function Start-Agent {
    if ($NoStart) { return }
    $task = Get-ScheduledTask -TaskName $TaskName -ErrorAction SilentlyContinue
    if ($DryRun -and -not $task) { Say "would start the task $TaskName"; return }
    if ($task.State -ne 'Running') {
        Invoke-Change "start the task $TaskName" { Start-ScheduledTask -TaskName $TaskName }
    } elseif ($script:Changed) {
        Stop-Agent
        Invoke-Change "start the task $TaskName" { Start-ScheduledTask -TaskName $TaskName }
    }
}

function Remove-PathIfPresent([string] $Path) {
    if (Test-Path -LiteralPath $Path) {
        Invoke-Change "remove $Path" { Remove-Item -LiteralPath $Path -Recurse -Force }
    }
}

function Invoke-Uninstall {
    Stop-Agent
    if (Get-ScheduledTask -TaskName $TaskName -ErrorAction SilentlyContinue) {
        Invoke-Change "unregister the task $TaskName" { Unregister-ScheduledTask -TaskName $TaskName -Confirm:$false }
    }
    Remove-PathIfPresent $InstallDir
    if ($Purge) {
        Remove-PathIfPresent $DataDir
    } else {
        Say "kept $DataDir (config, state, logs); use -Purge to remove it"
    }
}

if ($Purge -and -not $Uninstall) { Fail '-Purge only goes with -Uninstall' }
if ($Wheel -and -not (Test-Path -LiteralPath $Wheel -PathType Leaf)) { Fail "wheel $Wheel does not exist" }
if (-not $Uninstall) {
    if ($Wheel -and $PackageSpec) { Fail 'give -Wheel or -PackageSpec, not both' }
    if (-not $Wheel -and -not $PackageSpec) {
        Fail 'nothing to install: give -Wheel FILE -Sha256 HEX (a release''s, see scripts/release), or -PackageSpec SPEC with -IndexUrl URL of your private index'
    }
    if ($PackageSpec -and -not $IndexUrl -and -not $FindLinks) {
        Fail "-PackageSpec $PackageSpec would be resolved on the public index, where anyone can publish that name: give -Wheel FILE -Sha256 HEX, or -IndexUrl URL of your private index"
    }
    if ($IndexUrl -and -not $IndexUrl.StartsWith('https://')) { Fail '-IndexUrl must be https://' }
    if ($Wheel -and $Sha256) {
        $actual = (Get-FileHash -LiteralPath $Wheel -Algorithm SHA256).Hash.ToLowerInvariant()
        if ($actual -ne $Sha256.ToLowerInvariant()) {
            Fail "$(Split-Path -Leaf $Wheel): SHA-256 is $actual, not $Sha256 (-Sha256): refusing to install it"
        }
    }
}
if (-not $DryRun -and -not (Test-Administrator)) { Fail 'run as Administrator (or with -DryRun)' }

if ($Uninstall) {
    Invoke-Uninstall
} else {
    New-Directory $InstallDir
    Install-Venv
    Install-Config
    Install-Task
    Start-Agent
}
if (-not $script:Changed) { Say 'nothing to change' }
exit 0
