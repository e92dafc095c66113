{{/* The sidecar's non-secret settings: the ConfigMap's data (PROGRESS_CONTROL_* env). */}}
{{- define "progress-control.configData" -}}
{{- $schedule := .Values.schedule -}}
{{- $maxRecords := index $schedule "maxRecords" -}}
{{- $endMs := index $schedule "endMs" -}}
PROGRESS_CONTROL_KAFKA__BOOTSTRAP_SERVERS: {{ .Values.kafka.bootstrapServers | quote }}
{{- range $name, $value := .Values.kafka.config }}
PROGRESS_CONTROL_KAFKA__{{ include "progress-control.envSuffix" $name }}: {{ include "progress-control.envString" $value | quote }}
{{- end }}
PROGRESS_CONTROL_START_MS: {{ $schedule.startMs | int64 | quote }}
PROGRESS_CONTROL_BACKOFF_MS: {{ $schedule.backoffMs | int64 | quote }}
PROGRESS_CONTROL_BACKOFF_EXPONENTIAL: {{ $schedule.backoffExponential | toString | quote }}
{{- /* Env variables cannot be null: "none" unsets the count bound. */}}
PROGRESS_CONTROL_MAX_RECORDS: {{ if kindIs "invalid" $maxRecords }}"none"{{ else }}{{ $maxRecords | int64 | quote }}{{ end }}
{{- if not (kindIs "invalid" $endMs) }}
PROGRESS_CONTROL_END_MS: {{ $endMs | int64 | quote }}
{{- end }}
{{- with $schedule.topicsInclude }}
PROGRESS_CONTROL_TOPICS_INCLUDE: {{ join "," . | quote }}
{{- end }}
{{- with $schedule.topicsExclude }}
PROGRESS_CONTROL_TOPICS_EXCLUDE: {{ join "," . | quote }}
{{- end }}
PROGRESS_CONTROL_WATCH_ENABLED: {{ .Values.watch.enabled | toString | quote }}
PROGRESS_CONTROL_WATCH_INTERVAL_MS: {{ .Values.watch.intervalMs | int64 | quote }}
PROGRESS_CONTROL_REPORT_LISTEN: {{ if .Values.sidecar.report.enabled }}{{ include "progress-control.reportAddress" . | quote }}{{ else }}""{{ end }}
{{- if and .Values.sidecar.report.enabled (eq .Values.sidecar.report.transport "unix") }}
PROGRESS_CONTROL_REPORT_SOCKET_MODE: {{ .Values.sidecar.report.socketMode | quote }}
{{- with .Values.sidecar.report.allowedUids }}
PROGRESS_CONTROL_REPORT_ALLOWED_UIDS: {{ join "," . | quote }}
{{- end }}
{{- end }}
PROGRESS_CONTROL_LOG_FORMAT: {{ .Values.sidecar.logFormat | quote }}
PROGRESS_CONTROL_LOG_LEVEL: {{ .Values.sidecar.logLevel | quote }}
{{- end -}}
