{{/*
Labels shared by every object; identical to deploy/kustomize/base (no Helm-only
labels, so the two renderings stay comparable).
*/}}
{{- define "epochfs.labels" -}}
app.kubernetes.io/name: epochfs
app.kubernetes.io/part-of: epochfs
{{- end -}}

{{/* <registry>/<repository>:<tag>, or <repository>:<tag> when the registry is empty. */}}
{{- define "epochfs.image" -}}
{{- $registry := trimSuffix "/" (.registry | default "") -}}
{{- if not .repository -}}{{- fail "an image repository is empty" -}}{{- end -}}
{{- if or (not .tag) (eq (toString .tag) "latest") -}}
{{- fail (printf "image %s: pin an exact tag (empty and \"latest\" are refused)" .repository) -}}
{{- end -}}
{{- if $registry -}}
{{- printf "%s/%s:%s" $registry .repository (toString .tag) -}}
{{- else -}}
{{- printf "%s:%s" .repository (toString .tag) -}}
{{- end -}}
{{- end -}}

{{- define "epochfs.driverImage" -}}
{{- include "epochfs.image" (dict "registry" .Values.image.registry "repository" .Values.image.repository "tag" .Values.image.tag) -}}
{{- end -}}

{{- define "epochfs.sidecarImage" -}}
{{- include "epochfs.image" (dict "registry" .root.Values.sidecars.registry "repository" .sidecar.repository "tag" .sidecar.tag) -}}
{{- end -}}

{{/* The plugin's socket directory on the node. */}}
{{- define "epochfs.pluginDir" -}}
{{- printf "%s/plugins/cachefs.epochfs.io" (trimSuffix "/" .Values.kubeletDir) -}}
{{- end -}}


{{/* The mounter's socket: in the state dir, which csi-driver and mounter both mount. */}}
{{- define "epochfs.mounterEndpoint" -}}
{{- printf "unix://%s/mounter.sock" (trimSuffix "/" .Values.stateDir) -}}
{{- end -}}
