{{/*
Names, labels and checks shared by the chart's templates. Every template here takes the chart's
own context: `.` inside this chart, or `(index .Subcharts "progress-control")` from a parent
chart that has this one as a dependency.
*/}}

{{/* Chart name (nameOverride wins), a DNS label. */}}
{{- define "progress-control.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Prefix of resource names: fullnameOverride, else "<release>-<chart>" (once if equal). */}}
{{- define "progress-control.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* "<chart>-<version>" for the helm.sh/chart label. */}}
{{- define "progress-control.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels selecting this release's resources (stable across upgrades). */}}
{{- define "progress-control.selectorLabels" -}}
app.kubernetes.io/name: {{ include "progress-control.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels of every resource. */}}
{{- define "progress-control.labels" -}}
helm.sh/chart: {{ include "progress-control.chart" . }}
{{ include "progress-control.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kafka-progress-control
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* An image reference from (dict "repository" "tag" "digest"): repository@digest when a
digest is set (the tag is then ignored: a digest names exactly one image), else repository:tag. */}}
{{- define "progress-control.imageRef" -}}
{{- if .digest -}}
{{- printf "%s@%s" .repository .digest -}}
{{- else -}}
{{- printf "%s:%s" .repository .tag -}}
{{- end -}}
{{- end -}}

{{/* The chart's image reference (sidecar, ticker, helm test): image.digest, else image.tag, else
the chart's appVersion. */}}
{{- define "progress-control.image" -}}
{{- include "progress-control.imageRef" (dict "repository" .Values.image.repository "tag" (.Values.image.tag | default .Chart.AppVersion) "digest" .Values.image.digest) -}}
{{- end -}}

{{/* Name of the ConfigMap holding the sidecar's non-secret settings. */}}
{{- define "progress-control.configMapName" -}}
{{- include "progress-control.fullname" . | trunc 56 | trimSuffix "-" }}-config
{{- end -}}

{{/* A Kafka property name (security.protocol) as an env suffix (SECURITY_PROTOCOL). */}}
{{- define "progress-control.envSuffix" -}}
{{- . | replace "." "_" | replace "-" "_" | upper -}}
{{- end -}}

{{/* A values scalar as an env string: integers without exponent (Helm reads YAML numbers as
floats, and 1000000 would print as 1e+06). */}}
{{- define "progress-control.envString" -}}
{{- if kindIs "float64" . -}}
{{- int64 . -}}
{{- else -}}
{{- toString . -}}
{{- end -}}
{{- end -}}

{{/* Directory of the reports socket: an emptyDir shared by the sidecar and the app containers. */}}
{{- define "progress-control.reportSocketDir" -}}
/var/run/progress-control
{{- end -}}

{{/* Where interceptors in the pod report to and the sidecar listens: a Unix datagram socket on
the shared volume (sidecar.report.transport unix), or UDP on the pod's loopback (udp). */}}
{{- define "progress-control.reportAddress" -}}
{{- if eq .Values.sidecar.report.transport "unix" -}}
{{- printf "unix://%s/reports.sock" (include "progress-control.reportSocketDir" .) -}}
{{- else -}}
{{- printf "127.0.0.1:%d" (int .Values.sidecar.report.port) -}}
{{- end -}}
{{- end -}}

{{/* Whether reports go over the shared socket volume: "true" or "". */}}
{{- define "progress-control.reportSocket" -}}
{{- if and .Values.sidecar.report.enabled (eq .Values.sidecar.report.transport "unix") -}}
true
{{- end -}}
{{- end -}}

{{/*
Checks the schema cannot express; renders nothing, fails the render with a message naming the
values to change.
*/}}
{{- define "progress-control.validate" -}}
{{- $kafka := .Values.kafka -}}
{{- if and $kafka.secretEnv (not $kafka.existingSecret) -}}
{{- fail "progress-control: kafka.secretEnv needs kafka.existingSecret (the Secret to read from)" -}}
{{- end -}}
{{- if and $kafka.mountSecret (not $kafka.existingSecret) -}}
{{- fail "progress-control: kafka.mountSecret needs kafka.existingSecret (the Secret to mount)" -}}
{{- end -}}
{{- range $key, $_ := $kafka.config -}}
{{- $suffix := include "progress-control.envSuffix" $key -}}
{{- if eq $suffix "BOOTSTRAP_SERVERS" -}}
{{- fail "progress-control: set kafka.bootstrapServers, not kafka.config.bootstrap.servers" -}}
{{- end -}}
{{- /* The masking rule of progress_control/kafka_properties.py (a test keeps them equal): on
the name lower-cased, "_" and "-" read as ".". */ -}}
{{- if regexMatch `(password|passwd|passphrase|secret|token|credentials|key|\.pem)$|jaas|user\.?info|^sasl\..+\.config$` (regexReplaceAll "[_-]" (lower $key) ".") -}}
{{- fail (printf "progress-control: kafka.config.%s looks like a credential; ConfigMaps are not secret: put it in kafka.existingSecret and map it in kafka.secretEnv" $key) -}}
{{- end -}}
{{- if hasKey $kafka.secretEnv $suffix -}}
{{- fail (printf "progress-control: %s is set in both kafka.config and kafka.secretEnv" $key) -}}
{{- end -}}
{{- end -}}
{{- with .Values.signing -}}
{{- if and .keyId (not .secret.name) -}}
{{- fail "progress-control: signing.keyId needs signing.secret.name (the Secret holding the signing secret)" -}}
{{- end -}}
{{- if and .secret.name (not .keyId) -}}
{{- fail "progress-control: signing.secret.name needs signing.keyId (the key id readers verify with)" -}}
{{- end -}}
{{- end -}}
{{- $schedule := .Values.schedule -}}
{{- $maxRecords := index $schedule "maxRecords" -}}
{{- $endMs := index $schedule "endMs" -}}
{{- if and (kindIs "invalid" $maxRecords) (kindIs "invalid" $endMs) -}}
{{- fail "progress-control: set schedule.maxRecords or schedule.endMs, so control records stop during a long idle" -}}
{{- end -}}
{{- if and (not (kindIs "invalid" $endMs)) (lt (int64 $endMs) (int64 $schedule.startMs)) -}}
{{- fail "progress-control: schedule.endMs must be >= schedule.startMs" -}}
{{- end -}}
{{- if and .Values.sidecar.report.enabled (eq .Values.sidecar.report.transport "udp") (eq (int .Values.sidecar.report.port) (int .Values.sidecar.http.port)) -}}
{{- fail "progress-control: sidecar.report.port and sidecar.http.port must differ" -}}
{{- end -}}
{{- if and .Values.sidecar.native (semverCompare "<1.29.0-0" .Capabilities.KubeVersion.Version) -}}
{{- fail (printf "progress-control: sidecar.native=true needs Kubernetes >= 1.29 (native sidecar containers), this cluster is %s: set sidecar.native=false" .Capabilities.KubeVersion.Version) -}}
{{- end -}}
{{- end -}}

{{/*
Scheduling fields of a pod spec (mapping entries) for the runtime and the ticker: takes
(dict "values" <runtime or ticker values> "selector" <the pods' selector labels, YAML>).
affinity, when set, replaces the podAntiAffinityPreset's (soft: preferred, hard: required, none:
nothing; one pod per node, topologyKey kubernetes.io/hostname); topologySpreadConstraints, when
set, replace the topologySpreadPreset's (zone: spread over topology.kubernetes.io/zone,
ScheduleAnyway; none: nothing).
*/}}
{{- define "progress-control.placement" -}}
{{- $values := .values -}}
{{- $selector := .selector -}}
{{- if $values.affinity }}
affinity:
  {{- toYaml $values.affinity | nindent 2 }}
{{- else if eq $values.podAntiAffinityPreset "hard" }}
affinity:
  podAntiAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      - topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- $selector | nindent 12 }}
{{- else if eq $values.podAntiAffinityPreset "soft" }}
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              {{- $selector | nindent 14 }}
{{- end }}
{{- if $values.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml $values.topologySpreadConstraints | nindent 2 }}
{{- else if eq $values.topologySpreadPreset "zone" }}
topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: topology.kubernetes.io/zone
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels:
        {{- $selector | nindent 8 }}
{{- end }}
{{- with $values.priorityClassName }}
priorityClassName: {{ . | quote }}
{{- end }}
{{- with $values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
A Prometheus Operator ServiceMonitor scraping the http-metrics port of the Services it selects:
(dict "root" $ "name" <name> "component" <component label> "selector" <Service labels, YAML>).
Interval, timeout and extra labels from metrics.serviceMonitor.
*/}}
{{- define "progress-control.serviceMonitor" -}}
{{- $root := .root -}}
{{- $monitor := $root.Values.metrics.serviceMonitor -}}
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: {{ .name }}
  labels:
    {{- include "progress-control.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
    {{- with $monitor.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  selector:
    matchLabels:
      {{- .selector | nindent 6 }}
  namespaceSelector:
    matchNames:
      - {{ $root.Release.Namespace }}
  endpoints:
    - port: http-metrics
      path: /metrics
      scheme: http
      interval: {{ $monitor.interval }}
      {{- with $monitor.scrapeTimeout }}
      scrapeTimeout: {{ . }}
      {{- end }}
{{- end -}}

{{/* Whether a workload's ServiceMonitor renders ("true" or ""): its own
<workload>.metrics.serviceMonitor.enabled, null meaning metrics.serviceMonitor.enabled. Takes
(dict "root" $ "workload" <runtime or ticker values>). */}}
{{- define "progress-control.serviceMonitorEnabled" -}}
{{- $own := index .workload.metrics.serviceMonitor "enabled" -}}
{{- if kindIs "invalid" $own -}}
{{- if .root.Values.metrics.serviceMonitor.enabled }}true{{ end -}}
{{- else if $own -}}
true
{{- end -}}
{{- end -}}

{{/* Egress rules of a NetworkPolicy with networkPolicy.egress set (list items): DNS, then yours
(the brokers' addresses and ports). */}}
{{- define "progress-control.networkPolicy.egress" -}}
# DNS, to resolve the brokers' names.
- ports:
    - port: 53
      protocol: UDP
    - port: 53
      protocol: TCP
{{ toYaml .Values.networkPolicy.egress }}
{{- end -}}

{{/*
Env of the signing key (list items): (dict "signing" .Values.signing "prefix"
"PROGRESS_CONTROL_" or "PROGRESS_CONTROL_RUNTIME_"). Nothing without signing.keyId.
*/}}
{{- define "progress-control.signingEnv" -}}
{{- with .signing -}}
{{- if .keyId -}}
- name: {{ $.prefix }}SIGNING_KEY_ID
  value: {{ .keyId | quote }}
- name: {{ $.prefix }}SIGNING_KEY_SECRET
  valueFrom:
    secretKeyRef:
      name: {{ .secret.name | quote }}
      key: {{ .secret.key | quote }}
{{- end }}
{{- end }}
{{- end -}}
