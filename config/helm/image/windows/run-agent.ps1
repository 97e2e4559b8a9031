# Runs winnet-agent in its HostProcess container with the Pod's ServiceAccount token. The kubelet
# mounts the token under the container's sandbox, where client-go's in-cluster configuration does not
# look, so this writes a kubeconfig that points at it (client-go re-reads the token file as the
# kubelet rotates it) and passes every argument on to the agent.
$ErrorActionPreference = 'Stop'

$root = $env:CONTAINER_SANDBOX_MOUNT_POINT
$sa = Join-Path $root 'var\run\secrets\kubernetes.io\serviceaccount'
if (-not (Test-Path (Join-Path $sa 'token'))) {
    $sa = 'C:\var\run\secrets\kubernetes.io\serviceaccount'
}
if (-not (Test-Path (Join-Path $sa 'token'))) {
    throw "run-agent: no ServiceAccount token under $root or C:\var\run\secrets"
}
# The API server: WINNET_APISERVER (the chart's agent.apiServer) when set, because the kubernetes
# Service's ClusterIP is served by winnet itself on this node and cannot be relied on before the
# node network works; else the ClusterIP from KUBERNETES_SERVICE_HOST/PORT.
$server = $env:WINNET_APISERVER
if (-not $server) {
    $apiHost = $env:KUBERNETES_SERVICE_HOST
    if ($apiHost -like '*:*') { $apiHost = "[$apiHost]" }
    $server = "https://${apiHost}:$($env:KUBERNETES_SERVICE_PORT)"
}
$kubeconfig = Join-Path $root 'winnet\kubeconfig'
$ca = (Join-Path $sa 'ca.crt') -replace '\\', '/'
$token = (Join-Path $sa 'token') -replace '\\', '/'
@"
apiVersion: v1
kind: Config
clusters:
- name: in-cluster
  cluster:
    server: $server
    certificate-authority: $ca
users:
- name: winnet-agent
  user:
    tokenFile: $token
contexts:
- name: winnet-agent
  context:
    cluster: in-cluster
    user: winnet-agent
current-context: winnet-agent
"@ | Set-Content -Encoding ascii -Path $kubeconfig

& (Join-Path $root 'winnet\winnet-agent.exe') "--kubeconfig=$kubeconfig" @args
exit $LASTEXITCODE
