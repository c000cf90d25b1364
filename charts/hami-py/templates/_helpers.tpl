{{- define "hami.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{- define "hami.kubeScheduler.image" -}}
{{- if .Values.kubeScheduler.image -}}
{{ .Values.kubeScheduler.image }}
{{- else -}}
registry.k8s.io/kube-scheduler:{{ regexReplaceAll "[-+].*$" .Capabilities.KubeVersion.Version "" }}
{{- end -}}
{{- end }}

{{- define "hami.labels" -}}
app.kubernetes.io/part-of: hami-py
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end }}

{{- define "hami.tlsSecret" -}}
{{- if eq .Values.tls.mode "existing" -}}
{{ required "tls.existingSecret is required with tls.mode=existing" .Values.tls.existingSecret }}
{{- else -}}
hami-control-tls
{{- end -}}
{{- end }}

{{- define "hami.gpuResources" -}}
['nvidia.com/gpu', 'nvidia.com/gpumem', 'nvidia.com/gpumem-percentage', 'nvidia.com/gpucores', 'nvidia.com/priority']
{{- end }}

{{/* What only hami-control and hami-node write on a pod (hami_common/constants.py
SCHEDULER_POD_ANNOTATIONS): a pod created with them is sent to the webhook, which refuses it. */}}
{{- define "hami.schedulerAnnotations" -}}
['hami.io/vgpu-node', 'hami.io/vgpu-time', 'hami.io/vgpu-devices-to-allocate', 'hami.io/vgpu-devices-allocated', 'hami.io/bind-phase', 'hami.io/bind-time', 'hami.io/mutex.lock', 'hami.io/vgpu-mig-allocations']
{{- end }}
