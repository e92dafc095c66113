{{/* Labels of the metrics Service (what the ServiceMonitor selects). */}}
{{- define "progress-control.metrics.selectorLabels" -}}
{{ include "progress-control.selectorLabels" . }}
app.kubernetes.io/component: metrics
{{- end -}}

{{/* Pod labels the metrics Service selects. */}}
{{- define "progress-control.metrics.podSelector" -}}
{{- if .Values.metrics.service.selector -}}
{{- toYaml .Values.metrics.service.selector -}}
{{- else if .Values.example.enabled -}}
{{ include "progress-control.selectorLabels" . }}
app.kubernetes.io/component: example-producer
{{- else -}}
{{- fail "progress-control: metrics.service.selector must name your pods' labels when example.enabled=false" -}}
{{- end -}}
{{- end -}}
