{{/*
The SparkApplication of the sessionization stream (sparkSessionization.*): names, labels, the
job's command line and the driver/executor fields both pods share.
*/}}

{{/* Name of the SparkApplication; the operator derives pod and Service names from it
("<name>-ui-svc" must stay a 63-character DNS label). */}}
{{- define "progress-control.spark.name" -}}
{{- include "progress-control.fullname" . | trunc 41 | trimSuffix "-" }}-sessionization
{{- end -}}

{{/* The driver's ServiceAccount. */}}
{{- define "progress-control.spark.serviceAccountName" -}}
{{- $account := .Values.sparkSessionization.serviceAccount -}}
{{- if $account.name -}}
{{- $account.name -}}
{{- else -}}
{{- include "progress-control.fullname" . | trunc 57 | trimSuffix "-" }}-spark
{{- end -}}
{{- end -}}

{{/* ConfigMap holding the entry script. */}}
{{- define "progress-control.spark.entrypointName" -}}
{{- include "progress-control.fullname" . | trunc 46 | trimSuffix "-" }}-spark-entrypoint
{{- end -}}

{{/* Where the entry script is mounted in the driver container. */}}
{{- define "progress-control.spark.entrypointDir" -}}
/opt/progress-control/spark
{{- end -}}

{{- define "progress-control.spark.entrypointFile" -}}
sessionization_stream.py
{{- end -}}

{{/* The Python file the driver runs: sparkSessionization.mainApplicationFile, else the chart's
entry script. */}}
{{- define "progress-control.spark.mainApplicationFile" -}}
{{- with .Values.sparkSessionization.mainApplicationFile -}}
{{- . -}}
{{- else -}}
{{- printf "local://%s/%s" (include "progress-control.spark.entrypointDir" .) (include "progress-control.spark.entrypointFile" .) -}}
{{- end -}}
{{- end -}}

{{/* The driver and executor image; its tag defaults to the sidecar's (the same release); its
own digest when set (a different repository: image.digest does not apply). */}}
{{- define "progress-control.spark.image" -}}
{{- $image := .Values.sparkSessionization.image -}}
{{- include "progress-control.imageRef" (dict "repository" $image.repository "tag" ($image.tag | default (.Values.image.tag | default .Chart.AppVersion)) "digest" $image.digest) -}}
{{- end -}}

{{/* Labels of the Spark resources. */}}
{{- define "progress-control.spark.labels" -}}
{{ include "progress-control.labels" . }}
app.kubernetes.io/component: spark-sessionization
{{- end -}}

{{/* Labels of the driver and executor pods. */}}
{{- define "progress-control.spark.podLabels" -}}
{{ include "progress-control.selectorLabels" . }}
app.kubernetes.io/component: spark-sessionization
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* A values map as `KEY=VALUE` strings, sorted by key (numbers without exponent). */}}
{{- define "progress-control.spark.keyValues" -}}
{{- $pairs := list -}}
{{- range $key, $value := . -}}
{{- $pairs = append $pairs (printf "%s=%s" $key (include "progress-control.envString" $value)) -}}
{{- end -}}
{{- toJson $pairs -}}
{{- end -}}

{{/* Arguments of `python -m progress_control_apps.spark` (progress_control_apps/spark/cli.py), as a YAML list. */}}
{{- define "progress-control.spark.arguments" -}}
{{- $job := .Values.sparkSessionization -}}
{{- $args := list "stream"
  "--bootstrap-servers" ($job.bootstrapServers | default .Values.kafka.bootstrapServers)
  "--topic" $job.topic
  "--gap" $job.gap
  "--master" $job.master
  "--output" $job.output
  "--checkpoint" $job.checkpoint
  "--watermark-delay" $job.watermarkDelay
  "--trigger" $job.trigger
  "--starting-offsets" $job.startingOffsets -}}
{{- $maxOffsets := index $job "maxOffsetsPerTrigger" -}}
{{- if not (kindIs "invalid" $maxOffsets) -}}
{{- $args = concat $args (list "--max-offsets-per-trigger" (include "progress-control.envString" $maxOffsets)) -}}
{{- end -}}
{{- with $job.outputTopic -}}
{{- $args = concat $args (list "--output-topic" .) -}}
{{- end -}}
{{- range include "progress-control.spark.keyValues" $job.kafkaOptions | fromJsonArray -}}
{{- $args = concat $args (list "--kafka-option" .) -}}
{{- end -}}
{{- range include "progress-control.spark.keyValues" $job.jobConf | fromJsonArray -}}
{{- $args = concat $args (list "--conf" .) -}}
{{- end -}}
{{- $args = concat $args $job.extraArgs -}}
{{- toYaml $args -}}
{{- end -}}

{{/* Fields of the driver or executor spec both share; takes (dict "root" $ "pod" <values>). */}}
{{- define "progress-control.spark.podFields" -}}
{{- $root := .root -}}
{{- $job := $root.Values.sparkSessionization -}}
{{- $pod := .pod -}}
cores: {{ $pod.cores | int }}
{{- with $pod.coreRequest }}
coreRequest: {{ . | quote }}
{{- end }}
{{- with $pod.coreLimit }}
coreLimit: {{ . | quote }}
{{- end }}
memory: {{ $pod.memory | quote }}
{{- with $pod.memoryOverhead }}
memoryOverhead: {{ . | quote }}
{{- end }}
labels:
  {{- include "progress-control.spark.podLabels" $root | nindent 2 }}
{{- with $job.envFrom }}
envFrom:
  {{- toYaml . | nindent 2 }}
{{- end }}
podSecurityContext:
  {{- toYaml $job.podSecurityContext | nindent 2 }}
securityContext:
  {{- toYaml $job.securityContext | nindent 2 }}
{{- end -}}

{{/* The mounts of the driver and every executor (list items): the storage volume (nothing with
storage.type none) and sparkSessionization.secretMounts. */}}
{{- define "progress-control.spark.storageMounts" -}}
{{- $storage := .Values.sparkSessionization.storage -}}
{{- if ne $storage.type "none" }}
- name: data
  mountPath: {{ $storage.mountPath | quote }}
{{- end }}
{{- range .Values.sparkSessionization.secretMounts }}
- name: {{ .name }}
  mountPath: {{ .mountPath | quote }}
  readOnly: true
{{- end }}
{{- end -}}

{{/*
Checks the schema cannot express: a plain output or checkpoint path must be on the storage
volume, which the driver and every executor share; elsewhere it would be each pod's own
filesystem, lost on restart.
*/}}
{{- define "progress-control.spark.validate" -}}
{{- $job := .Values.sparkSessionization -}}
{{- $storage := $job.storage -}}
{{- $names := list "data" "entrypoint" -}}
{{- $paths := list $storage.mountPath (include "progress-control.spark.entrypointDir" .) -}}
{{- range $job.secretMounts -}}
{{- if has .name $names -}}
{{- fail (printf "progress-control: sparkSessionization.secretMounts names a volume %s, which is taken" .name) -}}
{{- end -}}
{{- if has .mountPath $paths -}}
{{- fail (printf "progress-control: sparkSessionization.secretMounts mounts %s at %s, which is taken" .name .mountPath) -}}
{{- end -}}
{{- $names = append $names .name -}}
{{- $paths = append $paths .mountPath -}}
{{- end -}}
{{- range $name := list "output" "checkpoint" -}}
{{- $path := index $job $name -}}
{{- if not (regexMatch "^[A-Za-z][A-Za-z0-9+.-]*://" $path) -}}
{{- if eq $storage.type "none" -}}
{{- fail (printf "progress-control: sparkSessionization.%s (%s) is a local path but storage.type is none: use a URI every pod reaches (s3a://...) or a storage volume" $name $path) -}}
{{- end -}}
{{- if not (hasPrefix (printf "%s/" $storage.mountPath) $path) -}}
{{- fail (printf "progress-control: sparkSessionization.%s (%s) must be under storage.mountPath (%s), shared by the driver and the executors, or a URI (s3a://...)" $name $path $storage.mountPath) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
