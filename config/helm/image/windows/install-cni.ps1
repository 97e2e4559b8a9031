# Installs the CNI plugin winnet's nodes run on the host: winnet-cni.exe, the shim kubelet's runtime
# calls. winnet-agent allocates Pod addresses in-process, so no IPAM plugin is installed; the agent
# removes this shim with the node's last Pod sandbox when the node network is torn down. The
# install-cni init container of the winnet-agent DaemonSet runs it as a HostProcess container (the
# host's file system is its file system); the image's files are under
# $env:CONTAINER_SANDBOX_MOUNT_POINT. The chart's ConfigMap provides WINNET_CNI_BIN_DIR.
#
# The network configuration (10-winnet.conflist) is not written here: winnet-agent writes it once the
# node network is Ready, so the runtime does not report the network ready before it is.
$ErrorActionPreference = 'Stop'

if ([string]::IsNullOrWhiteSpace($env:WINNET_CNI_BIN_DIR)) {
    throw "install-cni: environment variable WINNET_CNI_BIN_DIR is empty"
}
New-Item -ItemType Directory -Force -Path $env:WINNET_CNI_BIN_DIR | Out-Null

# The binary: copy under a temporary name, then swap it in. A plugin that the runtime is running
# cannot be overwritten, but it can be renamed out of the way; old copies are removed when unused.
foreach ($name in @('winnet-cni.exe')) {
    $source = Join-Path $env:CONTAINER_SANDBOX_MOUNT_POINT "winnet\$name"
    $target = Join-Path $env:WINNET_CNI_BIN_DIR $name
    Copy-Item -Force -Path $source -Destination "$target.new"
    if (Test-Path $target) {
        Move-Item -Force -Path $target -Destination "$target.old-$([DateTime]::UtcNow.Ticks)"
    }
    Move-Item -Force -Path "$target.new" -Destination $target
    # Old copies, and those the agent or the shim renamed aside when it removed a running shim.
    Get-ChildItem -Path "$target.old-*", "$target.removed-*" -ErrorAction SilentlyContinue | Remove-Item -Force -ErrorAction SilentlyContinue
    Write-Output "install-cni: installed $target"
}
