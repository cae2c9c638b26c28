{{/*
Labels shared by every object; identical to deploy/kustomize/base (no Helm-only
labels, so the two renderings stay comparable).
*/}}
{{- define "epochfs.labels" -}}
app.kubernetes.io/name: epochfs
app.kubernetes.io/part-of: epochfs
{{- end -}}

{{/*
<registry>/<repository>:<tag>, or <repository>:<tag> when the registry is empty.
Called with (dict "root" $ "registry" R "repository" P "tag" T).
global.localImages: always the plain local name <repository>:<tag>;
global.imageRegistry, when set, replaces R.
*/}}
{{- define "epochfs.image" -}}
{{- $g := .root.Values.global -}}
{{- $registry := trimSuffix "/" (.registry | default "") -}}
{{- if $g.imageRegistry -}}{{- $registry = trimSuffix "/" $g.imageRegistry -}}{{- end -}}
{{- if $g.localImages -}}{{- $registry = "" -}}{{- end -}}
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
{{- include "epochfs.image" (dict "root" . "registry" .Values.image.registry "repository" .Values.image.repository "tag" .Values.image.tag) -}}
{{- end -}}

{{/* The mounter DaemonSet's image: the EpochFS image, tag mounter.image.tag or image.tag. */}}
{{- define "epochfs.mounterImage" -}}
{{- include "epochfs.image" (dict "root" . "registry" .Values.image.registry "repository" .Values.image.repository "tag" (.Values.mounter.image.tag | default .Values.image.tag)) -}}
{{- end -}}

{{- define "epochfs.sidecarImage" -}}
{{- include "epochfs.image" (dict "root" .root "registry" .root.Values.sidecars.registry "repository" .sidecar.repository "tag" .sidecar.tag) -}}
{{- end -}}

{{/* imagePullPolicy of every container: Never for local images. */}}
{{- define "epochfs.pullPolicy" -}}
{{- if .Values.global.localImages -}}Never{{- else -}}{{- .Values.image.pullPolicy -}}{{- end -}}
{{- end -}}

{{/* The plugin's socket directory on the node. */}}
{{- define "epochfs.pluginDir" -}}
{{- printf "%s/plugins/cachefs.epochfs.io" (trimSuffix "/" .Values.kubeletDir) -}}
{{- end -}}


{{/* The mounter's socket: in the state dir, which csi-driver and mounter both mount. */}}
{{- define "epochfs.mounterEndpoint" -}}
{{- printf "unix://%s/mounter.sock" (trimSuffix "/" .Values.stateDir) -}}
{{- end -}}


{{/*
The node's allowed local roots, checked: each is mounted into the pods at its
own path, so a root that is or overlaps a directory the driver protects would
expose it (or hide it) inside the node plugin. The driver refuses such roots
too; the chart refuses them before anything is installed.
*/}}
{{- define "epochfs.localRoots" -}}
{{- $protected := dict "kubeletDir" (trimSuffix "/" .Values.kubeletDir) "stateDir" (trimSuffix "/" .Values.stateDir) "cacheRoot" (trimSuffix "/" .Values.cacheRoot) "/proc" "/proc" "/sys" "/sys" "/dev" "/dev" -}}
{{- $seen := dict -}}
{{- range $i, $root := .Values.node.allowedLocalRoots -}}
{{- $r := toString $root -}}
{{- $where := printf "node.allowedLocalRoots[%d] %q" $i $r -}}
{{- if not (hasPrefix "/" $r) -}}{{- fail (printf "%s: must be an absolute path" $where) -}}{{- end -}}
{{- if eq $r "/" -}}{{- fail (printf "%s: \"/\" would let volumes read the node's whole file system" $where) -}}{{- end -}}
{{- if or (ne (clean $r) $r) (contains "," $r) -}}{{- fail (printf "%s: write it clean (no trailing /, //, . or .., no comma)" $where) -}}{{- end -}}
{{- range $name, $p := $protected -}}
{{- if or (eq $r $p) (hasPrefix (printf "%s/" $p) $r) (hasPrefix (printf "%s/" $r) $p) -}}
{{- $what := ternary $p (printf "%s (%s)" $name $p) (eq $name $p) -}}
{{- fail (printf "%s: overlaps %s, which no volume may expose" $where $what) -}}
{{- end -}}
{{- end -}}
{{- if hasKey $seen $r -}}{{- fail (printf "%s: listed twice" $where) -}}{{- end -}}
{{- $_ := set $seen $r true -}}
{{- end -}}
{{- end -}}

{{/*
Read-only mounts of the allowed local roots, at their own paths, into a
container where sources are resolved or FUSE processes run. HostToContainer:
a kernel mount (NFS, CephFS) made under a root after the pod started is seen.
*/}}
{{- define "epochfs.localRootMounts" -}}
{{- range $i, $r := .Values.node.allowedLocalRoots }}
- name: local-root-{{ $i }}
  mountPath: {{ $r }}
  readOnly: true
  mountPropagation: HostToContainer
{{- end }}
{{- end -}}

{{/*
A DaemonSet updateStrategy from values: OnDelete renders alone (a
`--set ….updateStrategy.type=OnDelete` over a RollingUpdate default leaves
its rollingUpdate in the merged values).
*/}}
{{- define "epochfs.updateStrategy" -}}
{{- if eq .type "OnDelete" -}}
type: OnDelete
{{- else -}}
{{- toYaml . -}}
{{- end -}}
{{- end -}}
