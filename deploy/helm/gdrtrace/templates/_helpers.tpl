{{/* The selector every object shares with the kustomize base. */}}
{{- define "gdrtrace.selector" -}}
app.kubernetes.io/name: gdrtrace
{{- end }}

{{/* Labels of every object: the selector, and Helm's own. */}}
{{- define "gdrtrace.labels" -}}
{{ include "gdrtrace.selector" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{- define "gdrtrace.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* http or https: what the probes and the ServiceMonitor speak. */}}
{{- define "gdrtrace.scheme" -}}
{{ if .Values.tls.secretName }}HTTPS{{ else }}HTTP{{ end }}
{{- end }}
