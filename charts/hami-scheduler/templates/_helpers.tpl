{{/* The objects' name: fullnameOverride, else "<release>-scheduler" (the release name alone when it already
names a scheduler), at most 63 characters. */}}
{{- define "hami-scheduler.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains "scheduler" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-scheduler" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "hami-scheduler.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "hami-scheduler.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride -}}
{{- end -}}

{{- define "hami-scheduler.serviceAccount" -}}
{{- default (include "hami-scheduler.fullname" .) .Values.scheduler.serviceAccountName -}}
{{- end -}}

{{- define "hami-scheduler.tlsSecret" -}}
{{- printf "%s-tls" (include "hami-scheduler.fullname" .) -}}
{{- end -}}

{{- define "hami-scheduler.webhookName" -}}
{{- printf "%s-webhook" (include "hami-scheduler.fullname" .) -}}
{{- end -}}

{{- define "hami-scheduler.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hami-scheduler.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "hami-scheduler.labels" -}}
{{ include "hami-scheduler.selectorLabels" . }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.global.labels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* registry/repository:tag, global.imageRegistry first. Arguments: (list $ image defaultTag). */}}
{{- define "hami-scheduler.image" -}}
{{- $root := index . 0 -}}
{{- $image := index . 1 -}}
{{- $tag := default (index . 2) $image.tag -}}
{{- $registry := default $image.registry $root.Values.global.imageRegistry -}}
{{- if $registry -}}
{{- printf "%s/%s:%s" $registry $image.repository $tag -}}
{{- else -}}
{{- printf "%s:%s" $image.repository $tag -}}
{{- end -}}
{{- end -}}

{{/* imagePullSecrets of global + the given images. Arguments: (list $ image...). */}}
{{- define "hami-scheduler.pullSecrets" -}}
{{- $root := index . 0 -}}
{{- $secrets := $root.Values.global.imagePullSecrets -}}
{{- range (rest .) }}{{ $secrets = concat $secrets (default list .pullSecrets) }}{{ end -}}
{{- if $secrets }}
imagePullSecrets:
{{- range (uniq $secrets) }}
  - name: {{ . }}
{{- end }}
{{- end -}}
{{- end -}}

{{/* Where the extender listens, and the port of it. */}}
{{- define "hami-scheduler.extenderBind" -}}
{{- if .Values.scheduler.extender.bindAddress -}}
{{- .Values.scheduler.extender.bindAddress -}}
{{- else if .Values.scheduler.kubeScheduler.enabled -}}
127.0.0.1:8080
{{- else -}}
0.0.0.0:8080
{{- end -}}
{{- end -}}
{{- define "hami-scheduler.extenderPort" -}}
{{- last (splitList ":" (include "hami-scheduler.extenderBind" .)) -}}
{{- end -}}
{{- define "hami-scheduler.metricsPort" -}}
{{- last (splitList ":" .Values.scheduler.metricsBindAddress) -}}
{{- end -}}

{{/* Every resource name this scheduler manages, one per line. */}}
{{- define "hami-scheduler.managedResources" -}}
{{- $names := list .Values.resourceName .Values.resourceMem .Values.resourceMemPercentage .Values.resourceCores .Values.resourcePriority .Values.mluResourceName .Values.mluResourceMem .Values.mluResourceCores .Values.dcuResourceName .Values.dcuResourceMem .Values.dcuResourceCores -}}
{{- if .Values.devices.mthreads.enabled -}}
{{- $names = concat $names .Values.devices.mthreads.customresources (list "mthreads.com/sgpu-memory" "mthreads.com/sgpu-core") -}}
{{- end -}}
{{- $names = concat $names .Values.devices.awsneuron.customresources -}}
{{- if .Values.devices.kunlun.enabled -}}
{{- $names = concat $names .Values.devices.kunlun.customresources -}}
{{- end -}}
{{- if .Values.devices.iluvatar.enabled -}}
{{- $names = concat $names .Values.devices.iluvatar.customresources -}}
{{- end -}}
{{- $names = concat $names .Values.devices.amd.customresources -}}
{{- if .Values.devices.vastai.enabled -}}
{{- $names = concat $names .Values.devices.vastai.customresources -}}
{{- end -}}
{{- if .Values.devices.biren.enabled -}}
{{- $names = concat $names .Values.devices.biren.customresources -}}
{{- end -}}
{{- if .Values.devices.enflame.enabled -}}
{{- $names = concat $names .Values.devices.enflame.customresources -}}
{{- end -}}
{{- if .Values.devices.metax.enabled -}}
{{- $names = concat $names .Values.devices.metax.customresources -}}
{{- end -}}
{{- if .Values.devices.ascend.enabled -}}
{{- $names = concat $names .Values.devices.ascend.customresources -}}
{{- end -}}
{{- if .Values.devices.remotegpu.enabled -}}
{{- $names = concat $names (list .Values.devices.remotegpu.resourceCountName .Values.devices.remotegpu.resourceMemoryName) -}}
{{- end -}}
{{- range (uniq $names) }}
- {name: {{ . | quote }}, ignoredByScheduler: true}
{{- end -}}
{{- end -}}
