#!/usr/bin/env python3
"""Offline checks of the rendered EpochFS deployment manifests.

Run by scripts/deploy-check.sh, which renders the manifests first:

  check.py RENDER_DIR VALUES_TEST_FILE REPO_ROOT

RENDER_DIR holds kustomize-base.yaml, kustomize-examples.yaml,
kustomize-production.yaml, helm-default.yaml, helm-test.yaml (the chart
rendered with VALUES_TEST_FILE) and helm-nomounter.yaml (the chart rendered
with --set mounter.enabled=false). Needs python3 and PyYAML only; never talks to a
cluster. Prints every failure and exits 1 if there is any.
"""

import copy
import os
import re
import sys

import yaml

DRIVER = "cachefs.epochfs.io"
NAMESPACE = "epochfs-system"
DEFAULT_KUBELET_DIR = "/var/lib/kubelet"
DEFAULT_STATE_DIR = "/var/lib/epochfs/state"
DEFAULT_CACHE_ROOT = "/var/lib/epochfs/cache"
CLUSTER_SCOPED = {"Namespace", "CSIDriver", "ClusterRole", "ClusterRoleBinding",
                  "StorageClass", "PersistentVolume", "PriorityClass"}
READER_MODES = {"ReadOnlyMany", "ReadWriteOnce", "ReadWriteOncePod"}  # RWO(P) only with readOnly

failures = []


def fail(where, msg):
    failures.append(f"{where}: {msg}")


def load(path):
    """Parse a multi-document YAML stream; every document must be a Kubernetes object."""
    where = os.path.basename(path)
    try:
        with open(path) as f:
            docs = [d for d in yaml.safe_load_all(f) if d is not None]
    except yaml.YAMLError as e:
        fail(where, f"does not parse as YAML: {e}")
        return []
    objs, seen = [], set()
    for i, d in enumerate(docs):
        if not isinstance(d, dict):
            fail(where, f"document {i} is a {type(d).__name__}, not an object")
            continue
        md = d.get("metadata")
        if not d.get("apiVersion") or not d.get("kind") or not isinstance(md, dict) \
                or not isinstance(md.get("name"), str) or not md.get("name"):
            fail(where, f"document {i} lacks apiVersion, kind or metadata.name")
            continue
        k = key(d)
        if k in seen:
            fail(where, f"{fmt(k)} appears twice")
        seen.add(k)
        ns = md.get("namespace")
        if d["kind"] in CLUSTER_SCOPED and ns:
            fail(where, f"{fmt(k)} is cluster-scoped but has namespace {ns!r}")
        objs.append(d)
    if not objs:
        fail(where, "renders no objects")
    return objs


def key(o):
    return (o["kind"], o["metadata"].get("namespace") or "", o["metadata"]["name"])


def fmt(k):
    kind, ns, name = k
    return f"{kind} {ns + '/' if ns else ''}{name}"


def find(objs, kind, name=None):
    return [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def one(where, objs, kind, name):
    found = find(objs, kind, name)
    if len(found) != 1:
        fail(where, f"expected exactly one {kind} {name}, found {len(found)}")
        return None
    return found[0]


def containers(pod_spec):
    return (pod_spec.get("initContainers") or []) + (pod_spec.get("containers") or [])


def pod_specs(objs):
    """(object, pod spec) for every object that has a pod template or is a pod."""
    for o in objs:
        if o["kind"] == "Pod":
            yield o, o.get("spec") or {}
        elif o["kind"] in ("Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job"):
            yield o, ((o.get("spec") or {}).get("template") or {}).get("spec") or {}
        elif o["kind"] == "CronJob":
            yield o, (((o.get("spec") or {}).get("jobTemplate") or {}).get("spec") or {}) \
                .get("template", {}).get("spec") or {}


def container(where, spec, name):
    found = [c for c in spec.get("containers") or [] if c.get("name") == name]
    if len(found) != 1:
        fail(where, f"expected one container {name!r}, found {len(found)}")
        return {}
    return found[0]


# --- images ---------------------------------------------------------------------------

def split_image(ref):
    """(registry host or '', repository path, tag or '', digest or '') of an image reference,
    by the distribution reference rules: the first component is a registry host only if
    it contains '.' or ':' or is 'localhost'."""
    digest = ""
    if "@" in ref:
        ref, digest = ref.split("@", 1)
    name, tag = ref, ""
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        name, tag = ref[: len(ref) - len(last)] + last.split(":", 1)[0], last.split(":", 1)[1]
    host = ""
    parts = name.split("/")
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        host = parts[0]
    return host, name, tag, digest


def check_images(where, objs, prefix=None):
    for o, spec in pod_specs(objs):
        for c in containers(spec):
            img = c.get("image")
            w = f"{where}: {fmt(key(o))} container {c.get('name')}"
            if not isinstance(img, str) or not img:
                fail(w, "has no image")
                continue
            host, name, tag, digest = split_image(img)
            if not digest and (not tag or tag == "latest"):
                fail(w, f"image {img!r} is not pinned (empty tag or 'latest')")
            if host:
                fail(w, f"image {img!r} names a registry host ({host}); images carry no registry "
                        "host, it comes from image.registry / sidecars.registry or a kustomize images override")
            if prefix is not None and not img.startswith(prefix(c)):
                fail(w, f"image {img!r} does not start with {prefix(c)!r}")


HOSTLIKE_IMAGE = re.compile(
    r"(?<![\w.-])[a-z0-9-]+(?:\.[a-z0-9-]+)+(?::[0-9]+)?/(?:sig-storage|epochfs|kubernetes-csi|pytorch)/")
IMAGE_KEYS = re.compile(r"^\s*-?\s*(image|registry|repository|newName)\s*:\s*\"?([^\s\"#]+)")


def scan_sources(root):
    """No registry host name in any file of deploy/ or scripts/deploy-check.sh."""
    paths = [os.path.join(root, "scripts", "deploy-check.sh")]
    for d, _, files in os.walk(os.path.join(root, "deploy")):
        paths += [os.path.join(d, f) for f in files]
    for p in paths:
        rel = os.path.relpath(p, root)
        try:
            text = open(p, encoding="utf-8").read()
        except (OSError, UnicodeDecodeError) as e:
            fail(rel, f"cannot read: {e}")
            continue
        for n, line in enumerate(text.splitlines(), 1):
            m = HOSTLIKE_IMAGE.search(line)
            if m:
                fail(f"{rel}:{n}", f"names a registry host: {m.group(0)!r}")
            m = IMAGE_KEYS.match(line)
            if m and "{{" not in line:
                host = split_image(m.group(2))[0] if m.group(1) != "registry" else \
                    (m.group(2) if ("." in m.group(2).split("/")[0] or ":" in m.group(2)) else "")
                if host:
                    fail(f"{rel}:{n}", f"{m.group(1)} names a registry host: {host!r}")


# --- the driver objects ---------------------------------------------------------------

CONTAINER_KEYS = {"name", "image", "imagePullPolicy", "command", "args", "env", "envFrom", "ports",
                  "livenessProbe", "readinessProbe", "startupProbe", "resources", "volumeMounts",
                  "securityContext", "workingDir", "lifecycle", "terminationMessagePath",
                  "terminationMessagePolicy", "stdin", "tty", "volumeDevices", "restartPolicy"}
MOUNT_KEYS = {"name", "mountPath", "mountPropagation", "readOnly", "subPath", "subPathExpr",
              "recursiveReadOnly"}
SECCTX_KEYS = {"privileged", "allowPrivilegeEscalation", "capabilities", "readOnlyRootFilesystem",
               "runAsUser", "runAsGroup", "runAsNonRoot", "seLinuxOptions", "seccompProfile",
               "procMount", "appArmorProfile"}


def check_field_names(where, objs):
    """A typo in these fields would render fine and be silently ignored by old clusters."""
    for o, spec in pod_specs(objs):
        for c in containers(spec):
            w = f"{where}: {fmt(key(o))} container {c.get('name')}"
            for k in set(c) - CONTAINER_KEYS:
                fail(w, f"unknown container field {k!r}")
            for k in set(c.get("securityContext") or {}) - SECCTX_KEYS:
                fail(w, f"unknown securityContext field {k!r}")
            for m in c.get("volumeMounts") or []:
                for k in set(m) - MOUNT_KEYS:
                    fail(w, f"unknown volumeMount field {k!r}")


def check_csidriver(where, objs):
    d = one(where, objs, "CSIDriver", DRIVER)
    if not d:
        return
    s = d.get("spec") or {}
    if s.get("attachRequired") is not False:
        fail(where, "CSIDriver: attachRequired must be false")
    if s.get("podInfoOnMount") is not True:
        fail(where, "CSIDriver: podInfoOnMount must be true")
    modes = set(s.get("volumeLifecycleModes") or [])
    if modes not in ({"Persistent"}, {"Persistent", "Ephemeral"}):
        fail(where, f"CSIDriver: volumeLifecycleModes must be Persistent, or Persistent and Ephemeral, "
                    f"got {s.get('volumeLifecycleModes')}")
    # Inline volumes are advertised exactly when the node plugin accepts them.
    inline = {a for o in find(objs, "DaemonSet") for c in containers(o["spec"]["template"]["spec"])
              for a in args_of(c) if a.startswith("--allow-inline-volumes=")}
    want = "--allow-inline-volumes=true" if "Ephemeral" in modes else "--allow-inline-volumes=false"
    if inline != {want}:
        fail(where, f"CSIDriver modes {sorted(modes)} need the node plugin to run with {want}, got {sorted(inline) or 'none'}")
    if s.get("fsGroupPolicy") != "None":
        fail(where, "CSIDriver: fsGroupPolicy must be None")
    if s.get("requiresRepublish") is not False:
        fail(where, "CSIDriver: requiresRepublish must be false")


def args_of(c):
    return list(c.get("command") or []) + list(c.get("args") or [])


def has_arg(where, c, arg):
    if arg not in args_of(c):
        fail(where, f"container {c.get('name')} lacks argument {arg!r} (has {c.get('args')})")


def flag_values(c, flag):
    """Every value given to --flag (as --flag=V, --flag V, -flag=V or -flag V) in c's command and args."""
    a, out = args_of(c), []
    for i, x in enumerate(a):
        for f in ("--" + flag, "-" + flag):
            if x == f and i + 1 < len(a):
                out.append(a[i + 1])
            elif x.startswith(f + "="):
                out.append(x[len(f) + 1:])
    return out


def mounter_socket(state_dir):
    return "unix://" + state_dir.rstrip("/") + "/mounter.sock"


def check_daemonset(where, objs, kubelet_dir=DEFAULT_KUBELET_DIR, state_dir=DEFAULT_STATE_DIR,
                    cache_root=DEFAULT_CACHE_ROOT, update="RollingUpdate", mounter=True):
    ds = one(where, objs, "DaemonSet", "epochfs-node")
    if not ds:
        return
    w = f"{where}: DaemonSet epochfs-node"
    spec = ds["spec"]
    pod = spec["template"]["spec"]
    if pod.get("hostPID") is not True:
        fail(w, "hostPID must be true (mount processes must outlive the driver container)")
    if pod.get("serviceAccountName") != "epochfs-node":
        fail(w, "serviceAccountName must be epochfs-node")
    us = spec.get("updateStrategy") or {}
    if us.get("type") != update:
        fail(w, f"updateStrategy.type must be {update}, got {us.get('type')}")
    if update == "RollingUpdate" and (us.get("rollingUpdate") or {}).get("maxUnavailable") != 1:
        fail(w, "updateStrategy.rollingUpdate.maxUnavailable must be 1")
    vols = {v["name"]: v for v in pod.get("volumes") or []}

    drv = container(w, pod, "csi-driver")
    sc = drv.get("securityContext") or {}
    if sc.get("privileged") is not True:
        fail(w, "csi-driver container must be privileged")
    for a in ("--mode=node", "--endpoint=unix:///csi/csi.sock", "--nodeid=$(NODE_NAME)",
              f"--state-dir={state_dir}", f"--cache-root={cache_root}",
              "--cachefs-binary=/usr/local/bin/cachefs"):
        has_arg(w, drv, a)
    if not any(a.startswith("--metrics-addr=") for a in args_of(drv)):
        fail(w, "csi-driver lacks --metrics-addr")
    # Credentials only on the node's tmpfs, never on disk; mount logs capped.
    has_arg(w, drv, "--allow-disk-secrets=false")
    if not any(a.startswith("--mount-log-max-size=") for a in args_of(drv)):
        fail(w, "csi-driver lacks --mount-log-max-size")
    env = {e.get("name"): e for e in drv.get("env") or []}
    if ((env.get("NODE_NAME") or {}).get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath") \
            != "spec.nodeName":
        fail(w, "csi-driver needs env NODE_NAME from spec.nodeName")

    def mount_of(hostpath, want_type, c=drv):
        vs = [n for n, v in vols.items() if (v.get("hostPath") or {}).get("path") == hostpath]
        if len(vs) != 1:
            fail(w, f"expected one hostPath volume {hostpath}, found {len(vs)}")
            return {}
        if want_type and vols[vs[0]]["hostPath"].get("type") != want_type:
            fail(w, f"hostPath {hostpath} must have type {want_type}")
        ms = [m for m in c.get("volumeMounts") or [] if m.get("name") == vs[0]]
        if len(ms) != 1:
            fail(w, f"{c.get('name')} must mount hostPath {hostpath} once, found {len(ms)}")
            return {}
        if ms[0].get("mountPath") != hostpath:
            fail(w, f"hostPath {hostpath} must be mounted at the same path in the container "
                    f"(kubelet and the state file name host paths), got {ms[0].get('mountPath')}")
        return ms[0]

    km = mount_of(kubelet_dir, "Directory")
    if km and km.get("mountPropagation") != "Bidirectional":
        fail(w, f"the kubelet dir {kubelet_dir} must be mounted with mountPropagation: Bidirectional")
    sm = mount_of(state_dir, "DirectoryOrCreate")
    if sm and sm.get("mountPropagation") != "Bidirectional":
        fail(w, f"the state dir {state_dir} (holds the dataset FUSE mounts) must be mounted with "
                "mountPropagation: Bidirectional")
    mount_of(cache_root, "DirectoryOrCreate")
    mount_of("/dev/fuse", "CharDevice")
    probe = ((drv.get("livenessProbe") or {}).get("httpGet") or {})
    port_names = {p.get("name"): p.get("containerPort") for p in drv.get("ports") or []}
    if probe.get("port") != "healthz" or "healthz" not in port_names:
        fail(w, "csi-driver liveness probe must use the healthz port (served by the livenessprobe sidecar)")

    # The mounter: a container that starts the mount processes so that they live
    # outside the csi-driver container's cgroup (docs/CSI.md, "Restarts and upgrades").
    mounters = [c for c in pod.get("containers") or [] if c.get("name") == "mounter"]
    drv_ep = flag_values(drv, "mounter-endpoint")
    if not mounter:
        if mounters:
            fail(w, "mounter disabled, but the pod has a mounter container")
        if drv_ep:
            fail(w, f"mounter disabled, but csi-driver has --mounter-endpoint {drv_ep}")
    else:
        mnt = container(w, pod, "mounter")
        if mnt:
            msc = mnt.get("securityContext") or {}
            if msc.get("privileged") is not True:
                fail(w, "mounter container must be privileged (its FUSE mounts propagate to the host)")
            if "SYS_ADMIN" not in ((msc.get("capabilities") or {}).get("add") or []):
                fail(w, "mounter container must add capability SYS_ADMIN")
            for probe_kind in ("livenessProbe", "startupProbe"):
                if probe_kind in mnt:
                    fail(w, f"mounter must have no {probe_kind}: restarting it kills every mount on the node")
            if mnt.get("image") != drv.get("image"):
                fail(w, f"mounter image {mnt.get('image')!r} must be the driver's {drv.get('image')!r}")
            for a in ("--mode=mounter", f"--state-dir={state_dir}", "--cachefs-binary=/usr/local/bin/cachefs"):
                has_arg(w, mnt, a)
            if args_of(mnt)[:1] != ["/usr/local/bin/csi-driver"]:
                fail(w, "mounter must run /usr/local/bin/csi-driver")
            m_ep = flag_values(mnt, "mounter-endpoint")
            want_ep = mounter_socket(state_dir)
            if len(drv_ep) != 1 or len(m_ep) != 1 or drv_ep != m_ep:
                fail(w, f"csi-driver and mounter must name the same --mounter-endpoint once each "
                        f"(csi-driver {drv_ep}, mounter {m_ep})")
            elif drv_ep[0] != want_ep:
                fail(w, f"--mounter-endpoint must be {want_ep} (in the state dir, which both containers "
                        f"mount), got {drv_ep[0]}")
            msm = mount_of(state_dir, "DirectoryOrCreate", mnt)
            if msm and msm.get("mountPropagation") != "Bidirectional":
                fail(w, f"mounter must mount the state dir {state_dir} with mountPropagation: Bidirectional "
                        "(its FUSE mounts must reach the host and csi-driver)")
            mount_of(cache_root, "DirectoryOrCreate", mnt)
            mount_of("/dev/fuse", "CharDevice", mnt)
            lim = lambda c: ((c.get("resources") or {}).get("limits") or {}).get("memory")
            if lim(mnt) and lim(drv) and quantity(lim(mnt)) <= quantity(lim(drv)):
                fail(w, f"the mounter runs the mount processes: its memory limit ({lim(mnt)}) must exceed "
                        f"csi-driver's ({lim(drv)})")

    reg = container(w, pod, "node-driver-registrar")
    plugin_dir = kubelet_dir.rstrip("/") + f"/plugins/{DRIVER}"
    has_arg(w, reg, f"--kubelet-registration-path={plugin_dir}/csi.sock")
    has_arg(w, reg, "--csi-address=/csi/csi.sock")
    if not any(((v.get("hostPath") or {}).get("path") == plugin_dir) for v in vols.values()):
        fail(w, f"no hostPath volume for the plugin socket dir {plugin_dir}")
    if not any(((v.get("hostPath") or {}).get("path") == kubelet_dir.rstrip("/") + "/plugins_registry")
               for v in vols.values()):
        fail(w, "no hostPath volume for the kubelet plugins_registry dir")
    lp = container(w, pod, "liveness-probe")
    if port_names.get("healthz") and f"--health-port={port_names['healthz']}" not in args_of(lp):
        fail(w, f"liveness-probe must serve --health-port={port_names['healthz']} (the healthz port)")


UNITS = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def quantity(q):
    m = re.fullmatch(r"([0-9.]+)([kMGT]i?|Ki)?", str(q))
    if not m:
        fail("resources", f"cannot parse quantity {q!r}")
        return 0
    return float(m.group(1)) * UNITS[m.group(2) or ""]


def check_controller(where, objs, replicas=2, provisioner_timeout="60s"):
    d = one(where, objs, "Deployment", "epochfs-controller")
    if not d:
        return
    w = f"{where}: Deployment epochfs-controller"
    if d["spec"].get("replicas") != replicas:
        fail(w, f"replicas must be {replicas}, got {d['spec'].get('replicas')}")
    pod = d["spec"]["template"]["spec"]
    if pod.get("serviceAccountName") != "epochfs-controller":
        fail(w, "serviceAccountName must be epochfs-controller")
    drv = container(w, pod, "csi-driver")
    has_arg(w, drv, "--mode=controller")
    if not any(m.get("mountPath") == "/var/lib/epochfs/state" for m in drv.get("volumeMounts") or []):
        fail(w, "csi-driver needs a writable --state-dir volume (/var/lib/epochfs/state)")
    has_arg(w, drv, "--state-dir=/var/lib/epochfs/state")
    prov = container(w, pod, "csi-provisioner")
    for a in ("--extra-create-metadata", "--leader-election", "--csi-address=/csi/csi.sock",
              f"--timeout={provisioner_timeout}"):
        has_arg(w, prov, a)


def check_resources(where, objs):
    for o, spec in pod_specs(objs):
        for c in containers(spec):
            r = c.get("resources") or {}
            if not (r.get("requests") or {}).get("memory") or not (r.get("limits") or {}).get("memory"):
                fail(f"{where}: {fmt(key(o))} container {c.get('name')}",
                     "needs memory requests and limits")


def check_rbac(where, objs):
    for o in find(objs, "ClusterRole") + find(objs, "Role"):
        for r in o.get("rules") or []:
            if "secrets" in (r.get("resources") or []) or "*" in (r.get("resources") or []) \
                    or "*" in (r.get("verbs") or []):
                fail(where, f"{fmt(key(o))} grants {r}: no Secrets access and no wildcards")
    node = one(where, objs, "ClusterRole", "epochfs-node")
    if node and node.get("rules") != [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}]:
        fail(where, f"ClusterRole epochfs-node must grant exactly nodes get/patch, got {node.get('rules')}")
    ctl = one(where, objs, "ClusterRole", "epochfs-controller")
    if ctl:
        granted = {res for r in ctl.get("rules") or [] for res in r.get("resources") or []}
        for res in ("persistentvolumes", "persistentvolumeclaims", "storageclasses", "events"):
            if res not in granted:
                fail(where, f"ClusterRole epochfs-controller must grant {res} (csi-provisioner)")
    le = one(where, objs, "Role", "epochfs-controller-leader-election")
    if le and not any("leases" in (r.get("resources") or []) for r in le.get("rules") or []):
        fail(where, "Role epochfs-controller-leader-election must grant leases")
    for b in find(objs, "ClusterRoleBinding") + find(objs, "RoleBinding"):
        for s in b.get("subjects") or []:
            if s.get("kind") == "ServiceAccount" and not s.get("namespace"):
                fail(where, f"{fmt(key(b))}: ServiceAccount subject {s.get('name')} has no namespace")


def check_metrics_service(where, objs, port=9567):
    s = one(where, objs, "Service", "epochfs-metrics")
    if not s:
        return
    ports = s["spec"].get("ports") or []
    if [p.get("port") for p in ports] != [port] or ports[0].get("targetPort") != "metrics":
        fail(where, f"Service epochfs-metrics must expose port {port} -> targetPort metrics")
    if s["spec"].get("selector") != {"app.kubernetes.io/name": "epochfs", "app.kubernetes.io/component": "node"}:
        fail(where, "Service epochfs-metrics must select the node plugin pods")


def check_install(where, objs, **kw):
    check_csidriver(where, objs)
    check_daemonset(where, objs, **{k: v for k, v in kw.items()
                                    if k in ("kubelet_dir", "state_dir", "cache_root", "update", "mounter")})
    check_controller(where, objs, **{k: v for k, v in kw.items() if k in ("replicas", "provisioner_timeout")})
    check_rbac(where, objs)
    check_resources(where, objs)
    check_field_names(where, objs)
    for o in objs:
        if o["kind"] not in CLUSTER_SCOPED and o["metadata"].get("namespace") != NAMESPACE:
            fail(where, f"{fmt(key(o))} must be in namespace {NAMESPACE}")


# --- comparisons ----------------------------------------------------------------------

def diff(a, b, path=""):
    """Human-readable differences between two parsed objects."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            if k not in a:
                out.append(f"{path}.{k}: only in helm")
            elif k not in b:
                out.append(f"{path}.{k}: only in kustomize")
            else:
                out += diff(a[k], b[k], f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in diff(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: kustomize {a!r} != helm {b!r}"]


def compare(where, kobjs, hobjs, ignore_kinds=("Namespace",)):
    k = {key(o): o for o in kobjs if o["kind"] not in ignore_kinds}
    h = {key(o): o for o in hobjs if o["kind"] not in ignore_kinds}
    for x in sorted(set(k) - set(h)):
        fail(where, f"{fmt(x)} is rendered by kustomize but not by helm")
    for x in sorted(set(h) - set(k)):
        fail(where, f"{fmt(x)} is rendered by helm but not by kustomize")
    for x in sorted(set(k) & set(h)):
        for d in diff(k[x], h[x]):
            fail(where, f"{fmt(x)} differs: {d}")


# --- examples -------------------------------------------------------------------------

def check_examples(where, objs):
    check_images(where, objs)
    check_field_names(where, objs)
    secrets = {(o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in find(objs, "Secret")}
    for s in secrets.values():
        data = s.get("stringData") or {}
        for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            if k not in data:
                fail(where, f"Secret {s['metadata']['name']} lacks {k}")
            elif "FAKE" not in str(data[k]):
                fail(where, f"Secret {s['metadata']['name']} {k} must be an obviously fake placeholder")
        if s.get("data"):
            fail(where, f"Secret {s['metadata']['name']}: use stringData placeholders, not data")

    def secret_ref(w, ns, name):
        if (ns, name) not in secrets:
            fail(w, f"refers to Secret {ns}/{name}, which the examples do not define")

    scs = find(objs, "StorageClass")
    if not scs:
        fail(where, "no StorageClass example")
    for sc in scs:
        w = f"{where}: StorageClass {sc['metadata']['name']}"
        p = sc.get("parameters") or {}
        if sc.get("provisioner") != DRIVER:
            fail(w, f"provisioner must be {DRIVER}")
        if not p.get("source"):
            fail(w, "parameters.source is required")
        if not p.get("csi.storage.k8s.io/node-stage-secret-name") or \
                not p.get("csi.storage.k8s.io/node-stage-secret-namespace"):
            fail(w, "must reference its S3 credentials as a node-stage secret")
        else:
            secret_ref(w, p["csi.storage.k8s.io/node-stage-secret-namespace"],
                       p["csi.storage.k8s.io/node-stage-secret-name"])
        for k in p:
            if k not in ("source", "cacheSize", "manifest", "policy") and not k.startswith("csi.storage.k8s.io/"):
                fail(w, f"unknown parameter {k!r}")
    pvs = [pv for pv in find(objs, "PersistentVolume") if (pv["spec"].get("csi") or {}).get("driver") == DRIVER]
    if not pvs:
        fail(where, "no static PersistentVolume example")
    for pv in pvs:
        w = f"{where}: PersistentVolume {pv['metadata']['name']}"
        csi = pv["spec"]["csi"]
        if not csi.get("volumeHandle"):
            fail(w, "needs csi.volumeHandle")
        if not (csi.get("volumeAttributes") or {}).get("source"):
            fail(w, "needs csi.volumeAttributes.source")
        ref = csi.get("nodeStageSecretRef") or {}
        if not ref.get("name") or not ref.get("namespace"):
            fail(w, "needs csi.nodeStageSecretRef name and namespace")
        else:
            secret_ref(w, ref["namespace"], ref["name"])
        if pv["spec"].get("accessModes") != ["ReadOnlyMany"]:
            fail(w, "accessModes must be [ReadOnlyMany]")
    pvcs = find(objs, "PersistentVolumeClaim")
    for pvc in pvcs:
        modes = set(pvc["spec"].get("accessModes") or [])
        if modes != {"ReadOnlyMany"}:
            fail(f"{where}: PersistentVolumeClaim {pvc['metadata']['name']}", "accessModes must be [ReadOnlyMany]")
    claims = {(o["metadata"].get("namespace"), o["metadata"]["name"]) for o in pvcs}
    used_pvc = inline = False
    for o, spec in pod_specs(objs):
        for v in spec.get("volumes") or []:
            w = f"{where}: {fmt(key(o))} volume {v.get('name')}"
            if "persistentVolumeClaim" in v:
                used_pvc = True
                if (o["metadata"].get("namespace"), v["persistentVolumeClaim"].get("claimName")) not in claims:
                    fail(w, "refers to a PVC the examples do not define")
            if (v.get("csi") or {}).get("driver") == DRIVER:
                inline = True
                if v["csi"].get("readOnly") is not True:
                    fail(w, "inline volume must be readOnly: true")
                if not (v["csi"].get("volumeAttributes") or {}).get("source"):
                    fail(w, "inline volume needs volumeAttributes.source")
                ref = v["csi"].get("nodePublishSecretRef") or {}
                if not ref.get("name"):
                    fail(w, "inline volume needs nodePublishSecretRef (S3 credentials)")
                else:
                    secret_ref(w, o["metadata"].get("namespace"), ref["name"])
    if not used_pvc:
        fail(where, "no pod uses a PVC")
    if not inline:
        fail(where, f"no pod uses an inline {DRIVER} volume")


def merge(base, over):
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = merge(base.get(k), v)
        return out
    return over


# --- main -----------------------------------------------------------------------------

def main():
    render_dir, values_file, root = sys.argv[1:4]
    r = lambda n: load(os.path.join(render_dir, n))
    base, examples, prod = r("kustomize-base.yaml"), r("kustomize-examples.yaml"), r("kustomize-production.yaml")
    hdef, htest, hnomnt = r("helm-default.yaml"), r("helm-test.yaml"), r("helm-nomounter.yaml")
    # What the chart sees: its values.yaml merged with the test values (maps merge
    # key by key, anything else is replaced, as in helm).
    with open(os.path.join(root, "deploy", "helm", "epochfs", "values.yaml")) as f:
        defaults = yaml.safe_load(f)
    with open(values_file) as f:
        tv = merge(defaults, yaml.safe_load(f))

    # Every rendering: images pinned, no registry host.
    for name, objs in (("kustomize base", base), ("kustomize production overlay", prod),
                       ("helm default values", hdef)):
        check_images(name, objs)

    # The base, the overlay and the default chart: the same driver install.
    check_install("kustomize base", base)
    check_metrics_service("kustomize base", base)
    one("kustomize base", base, "Namespace", NAMESPACE)
    check_install("helm default values", hdef)
    check_metrics_service("helm default values", hdef)
    check_install("kustomize production overlay", prod, update="OnDelete")

    # mounter.enabled=false: the default rendering without the mounter container
    # and --mounter-endpoint, the mount processes' resources back on csi-driver.
    w = "helm mounter.enabled=false"
    check_install(w, hnomnt, mounter=False)
    expect = copy.deepcopy(hdef)
    for o in expect:
        if o["kind"] == "DaemonSet":
            pod = o["spec"]["template"]["spec"]
            pod["containers"] = [c for c in pod["containers"] if c.get("name") != "mounter"]
            for c in pod["containers"]:
                if c.get("name") == "csi-driver":
                    c["args"] = [a for a in c["args"] if not a.startswith("--mounter-endpoint=")]
                    c["resources"] = defaults["mounter"]["resources"]
    compare(f"{w} vs default values without the mounter", expect, hnomnt)

    # Same objects, field for field: helm (defaults) == kustomize base, except the
    # Namespace, which `helm install --create-namespace` makes.
    compare("kustomize base vs helm default values", base, hdef)
    # The overlay changes only the DaemonSet's updateStrategy.
    expect = copy.deepcopy(base)
    for o in expect:
        if o["kind"] == "DaemonSet":
            o["spec"]["updateStrategy"] = {"type": "OnDelete"}
    compare("kustomize production overlay vs base + OnDelete", expect, prod, ignore_kinds=())

    # The chart with every option set (values-test.yaml).
    w = "helm test values"
    reg = tv["image"]["registry"].rstrip("/") + "/"
    sreg = tv["sidecars"]["registry"].rstrip("/") + "/"
    check_images(w, htest, prefix=lambda c: reg + tv["image"]["repository"] + ":" + tv["image"]["tag"]
                 if c["name"] in ("csi-driver", "mounter") else sreg + "sig-storage/")
    check_install(w, htest, kubelet_dir=tv["kubeletDir"].rstrip("/"), state_dir=tv["stateDir"],
                  cache_root=tv["cacheRoot"], update=tv["node"]["updateStrategy"]["type"],
                  replicas=tv["controller"]["replicas"], provisioner_timeout=tv["sidecars"]["provisioner"]["timeout"],
                  mounter=tv["mounter"]["enabled"])
    check_metrics_service(w, htest, port=tv["metrics"]["port"])
    compare("kustomize base vs helm test values (kinds/names)",
            [{"kind": o["kind"], "metadata": {"name": o["metadata"]["name"],
                                              "namespace": o["metadata"].get("namespace")}} for o in base],
            [{"kind": o["kind"], "metadata": {"name": o["metadata"]["name"],
                                              "namespace": o["metadata"].get("namespace")}} for o in htest],
            ignore_kinds=("Namespace", "StorageClass"))
    ds = one(w, htest, "DaemonSet", "epochfs-node")
    if ds:
        pod = ds["spec"]["template"]["spec"]
        drv = container(w, pod, "csi-driver")
        for a in (f"--log-format={tv['logFormat']}", f"--health-interval={tv['healthInterval']}",
                  f"--metrics-addr=0.0.0.0:{tv['metrics']['port']}"):
            has_arg(w, drv, a)
        checks = {
            "nodeSelector": (pod.get("nodeSelector"), tv["node"]["nodeSelector"]),
            "tolerations": (pod.get("tolerations"), tv["node"]["tolerations"]),
            "affinity": (pod.get("affinity"), tv["node"]["affinity"]),
            "priorityClassName": (pod.get("priorityClassName"), tv["node"]["priorityClassName"]),
            "csi-driver resources": (drv.get("resources"),
                                     tv["node"]["resources"] if tv["mounter"]["enabled"] else tv["mounter"]["resources"]),
            "imagePullSecrets": (pod.get("imagePullSecrets"), tv["imagePullSecrets"]),
            "imagePullPolicy": (drv.get("imagePullPolicy"), tv["image"]["pullPolicy"]),
            "terminationGracePeriodSeconds": (pod.get("terminationGracePeriodSeconds"),
                                              tv["node"]["terminationGracePeriodSeconds"]),
            "pod annotations": (ds["spec"]["template"]["metadata"].get("annotations"), tv["node"]["podAnnotations"]),
        }
        for what, (got, want) in checks.items():
            if got != want:
                fail(w, f"DaemonSet {what}: got {got!r}, want {want!r}")
        if tv["mounter"]["enabled"]:
            mnt = container(w, pod, "mounter")
            if mnt.get("resources") != tv["mounter"]["resources"]:
                fail(w, f"DaemonSet mounter resources: got {mnt.get('resources')!r}, want {tv['mounter']['resources']!r}")
            for a in (f"--log-format={tv['logFormat']}", f"--state-dir={tv['stateDir']}"):
                has_arg(w, mnt, a)
            if mnt.get("imagePullPolicy") != tv["image"]["pullPolicy"]:
                fail(w, "DaemonSet mounter imagePullPolicy not applied")
        lp = container(w, pod, "liveness-probe")
        has_arg(w, lp, f"--health-port={tv['healthPort']}")
        reg_c = container(w, pod, "node-driver-registrar")
        has_arg(w, reg_c, f"--http-endpoint=:{tv['sidecars']['nodeDriverRegistrar']['healthPort']}")
    dep = one(w, htest, "Deployment", "epochfs-controller")
    if dep:
        pod = dep["spec"]["template"]["spec"]
        if pod.get("nodeSelector") != tv["controller"]["nodeSelector"]:
            fail(w, "Deployment nodeSelector not applied")
        if "tolerations" in pod or "priorityClassName" in pod:
            fail(w, "Deployment: empty tolerations / priorityClassName must render nothing")
        if container(w, pod, "csi-driver").get("resources") != tv["controller"]["resources"]:
            fail(w, "Deployment csi-driver resources not applied")
    sc = one(w, htest, "StorageClass", tv["storageClass"]["name"])
    if sc:
        want = {k: v for k, v in tv["storageClass"]["parameters"].items() if v}
        want["csi.storage.k8s.io/node-stage-secret-name"] = tv["storageClass"]["nodeStageSecret"]["name"]
        want["csi.storage.k8s.io/node-stage-secret-namespace"] = tv["storageClass"]["nodeStageSecret"]["namespace"]
        if sc.get("parameters") != want:
            fail(w, f"StorageClass parameters: got {sc.get('parameters')}, want {want}")
        if sc.get("provisioner") != DRIVER or sc.get("reclaimPolicy") != tv["storageClass"]["reclaimPolicy"] \
                or sc.get("volumeBindingMode") != tv["storageClass"]["volumeBindingMode"]:
            fail(w, "StorageClass provisioner/reclaimPolicy/volumeBindingMode not as configured")
        if (sc["metadata"].get("annotations") or {}).get("storageclass.kubernetes.io/is-default-class") != "true":
            fail(w, "StorageClass isDefault not applied")

    check_examples("kustomize examples", examples)
    scan_sources(root)

    if failures:
        print(f"deploy-check: {len(failures)} problem(s):", file=sys.stderr)
        for f in failures:
            print(f"  FAIL {f}", file=sys.stderr)
        return 1
    n = sum(len(x) for x in (base, examples, prod, hdef, htest, hnomnt))
    print(f"deploy-check: checks passed ({n} objects in 6 renderings)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
