{{/* Chart name and version as used by the chart label. */}}
{{- define "winnet.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels on every object; pass (dict "ctx" $ "component" "agent"). */}}
{{- define "winnet.labels" -}}
helm.sh/chart: {{ include "winnet.chart" .ctx }}
app.kubernetes.io/name: winnet
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
{{- with .ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels of a component's Pods; pass (dict "ctx" $ "component" "agent"). */}}
{{- define "winnet.selectorLabels" -}}
app.kubernetes.io/name: winnet
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Image reference; pass (dict "ctx" $ "image" .Values.x.image). */}}
{{- define "winnet.image" -}}
{{- printf "%s:%s" .image.repository (default .ctx.Chart.AppVersion .image.tag) -}}
{{- end -}}

{{/* The OVS container's image: its own when set, else the agent's. */}}
{{- define "winnet.ovsImage" -}}
{{- if .Values.ovs.image.repository -}}
{{- include "winnet.image" (dict "ctx" . "image" .Values.ovs.image) -}}
{{- else -}}
{{- include "winnet.image" (dict "ctx" . "image" (dict "repository" .Values.agent.image.repository "tag" (default .Values.agent.image.tag .Values.ovs.image.tag))) -}}
{{- end -}}
{{- end -}}

{{/* Bind address for a port: "0" disables the endpoint. */}}
{{- define "winnet.bindAddress" -}}
{{- if eq (int .) 0 }}0{{ else }}:{{ . }}{{ end -}}
{{- end -}}

{{/* ServiceAccount user name of the agent, as the API server authenticates it. */}}
{{- define "winnet.agentUser" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace .Values.serviceAccount.agent.name -}}
{{- end -}}

{{/* ServiceAccount user name of winnet-controller. */}}
{{- define "winnet.controllerUser" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace .Values.serviceAccount.controller.name -}}
{{- end -}}

{{/* ServiceAccount user name of the uninstall hook's Job (its ServiceAccount is winnet-uninstall). */}}
{{- define "winnet.uninstallUser" -}}
{{- printf "system:serviceaccount:%s:winnet-uninstall" .Release.Namespace -}}
{{- end -}}

{{/* Name of the agent's ConfigMap. */}}
{{- define "winnet.agentConfigName" -}}
winnet-agent-config
{{- end -}}


{{/* Annotations of the uninstall hook's objects; pass the hook weight ("-10" before the Job's "0"). */}}
{{- define "winnet.uninstallHook" -}}
helm.sh/hook: pre-delete
helm.sh/hook-weight: {{ . | quote }}
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end -}}
