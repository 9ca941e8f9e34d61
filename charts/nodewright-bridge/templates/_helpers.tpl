{{/*
Names are truncated to 63 characters: Kubernetes object names that become labels or DNS labels
must fit a DNS-1123 label.
*/}}
{{- define "nwb.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "nwb.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "nwb.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "nwb.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "nwb.namespace" -}}
{{- if eq .Values.namespace "default" -}}
{{- fail "ERROR: namespace must not be \"default\": the controller namespace is labelled for privileged pods" -}}
{{- end -}}
{{- .Values.namespace -}}
{{- end -}}

{{- define "nwb.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nwb.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end -}}

{{- define "nwb.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | trunc 63 | trimSuffix "-" }}
{{ include "nwb.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: nodewright-bridge
{{- end -}}

{{- define "nwb.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "nwb.checks" -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.leaderElection.enabled) -}}
{{- fail "ERROR: replicaCount > 1 needs leaderElection.enabled=true, or two controllers would act at once" -}}
{{- end -}}
{{- if and .Values.podDisruptionBudget.enabled (ge (int .Values.podDisruptionBudget.minAvailable) (int .Values.replicaCount)) -}}
{{- fail "ERROR: podDisruptionBudget.minAvailable must be lower than replicaCount, or no node with a controller pod could ever be drained" -}}
{{- end -}}
{{- end -}}
