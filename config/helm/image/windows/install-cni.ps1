# Installs winnet-cni.exe and the CNI network configuration list on the host. The install-cni init
# container of the winnet-agent DaemonSet runs it as a HostProcess container (the host's file system
# is its file system); the image's files are under $env:CONTAINER_SANDBOX_MOUNT_POINT. The chart's
# ConfigMap provides the environment:
#   WINNET_CNI_BIN_DIR, WINNET_CNI_CONF_DIR, WINNET_CNI_CONF_NAME, WINNET_CNI_CONFLIST (the JSON)
$ErrorActionPreference = 'Stop'

foreach ($name in 'WINNET_CNI_BIN_DIR', 'WINNET_CNI_CONF_DIR', 'WINNET_CNI_CONF_NAME', 'WINNET_CNI_CONFLIST') {
    if ([string]::IsNullOrWhiteSpace([Environment]::GetEnvironmentVariable($name))) {
        throw "install-cni: environment variable $name is empty"
    }
}
$source = Join-Path $env:CONTAINER_SANDBOX_MOUNT_POINT 'winnet\winnet-cni.exe'
New-Item -ItemType Directory -Force -Path $env:WINNET_CNI_BIN_DIR, $env:WINNET_CNI_CONF_DIR | Out-Null

# The binary: copy under a temporary name, then swap it in. A winnet-cni.exe that kubelet is running
# cannot be overwritten, but it can be renamed out of the way; old copies are removed when unused.
$target = Join-Path $env:WINNET_CNI_BIN_DIR 'winnet-cni.exe'
Copy-Item -Force -Path $source -Destination "$target.new"
if (Test-Path $target) {
    Move-Item -Force -Path $target -Destination "$target.old-$([DateTime]::UtcNow.Ticks)"
}
Move-Item -Force -Path "$target.new" -Destination $target
Get-ChildItem -Path "$target.old-*" -ErrorAction SilentlyContinue | Remove-Item -Force -ErrorAction SilentlyContinue
Write-Output "install-cni: installed $target"

# The configuration: UTF-8 without a byte order mark (CNI loaders reject one), written atomically.
$conf = Join-Path $env:WINNET_CNI_CONF_DIR $env:WINNET_CNI_CONF_NAME
[System.IO.File]::WriteAllText("$conf.tmp", $env:WINNET_CNI_CONFLIST, (New-Object System.Text.UTF8Encoding $false))
Move-Item -Force -Path "$conf.tmp" -Destination $conf
Write-Output "install-cni: wrote $conf"
