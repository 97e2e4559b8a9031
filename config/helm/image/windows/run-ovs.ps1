# Keeps the node's Open vSwitch running for winnet-agent (the chart's optional "openvswitch"
# container, ovs.enabled=true): starts the ovsdb-server and ovs-vswitchd Windows services that the
# Open vSwitch for Windows package installs on the host, in that order, and starts them again
# whenever they stop. It does not install OVS.
$ErrorActionPreference = 'Stop'

$services = 'ovsdb-server', 'ovs-vswitchd'
foreach ($name in $services) {
    if (-not (Get-Service -Name $name -ErrorAction SilentlyContinue)) {
        throw "run-ovs: Windows service $name not found: install Open vSwitch for Windows on this node"
    }
}
while ($true) {
    foreach ($name in $services) {
        $service = Get-Service -Name $name
        if ($service.Status -ne 'Running') {
            Write-Output "run-ovs: starting $name (was $($service.Status))"
            Start-Service -Name $name
        }
    }
    Start-Sleep -Seconds 10
}
