#!/usr/bin/env python3
"""Offline checks of the EpochFS deployment manifests: what the real install cannot prove.

Run by scripts/deploy-check.sh, which renders the kustomize trees first:

  HELM=/path/to/helm check.py RENDER_DIR VALUES_TEST_FILE REPO_ROOT

RENDER_DIR holds kustomize-{base,examples,production,job-controller}.yaml. This script
renders the chart once per entry of VARIANTS (expectations derived from each entry's
values) and makes sure it refuses every entry of REFUSALS. Needs python3 and PyYAML;
never talks to a cluster. Prints every failure and exits 1 if there is any.

Left to others, and not checked here:
  - values.schema.json (helm lint, helm template): types, enums, sizes, unknown keys;
  - TestDeployDryRunEverything (pkg/job/controller, make test): every rendering is
    valid for a real kube-apiserver (server-side dry run, strict field validation);
  - the e2e (e2e/, make test: helm install and upgrade on a real kubelet with the
    builtin sidecars, local images, node.hostNetwork, extraEnv, inline volumes, the job
    controller): the objects the install creates, the pod specs, paths, propagation,
    endpoints, ports and probes with the builtin sidecars, the arguments the binaries
    need to run, register (CSINode), mount, serve metrics and re-adopt mounts (hostPID),
    the CSIDriver, and the RBAC the driver and job controller use being enough.

Checked here (a broken one of these still installs and passes the e2e):
  - security: privileged, added capabilities and Bidirectional mounts only for csi-driver
    and the mounter, the rest drop ALL; hostPID/hostNetwork/hostPath only on the node
    DaemonSets and hostNetwork only with node.hostNetwork; the exact hostPath list and
    which container mounts which, local roots read-only; the mounter without API token
    or probes; RBAC least privilege, no Secrets, no wildcards; images pinned and from
    KNOWN_REGISTRIES only (renderings, examples and every file of deploy/);
    allow-disk-secrets, allow-inline-volumes, allow-node-credentials as the values say;
  - the chart equals the kustomize trees (base, production overlay, job controller) and
    mounter.enabled=false is the defaults minus the mounter;
  - values the e2e does not set reach their objects: the source policy and limits,
    scheduling, annotations, resources, pull secrets, image mirrors, update strategies,
    the upstream sidecars, controller.enabled, the StorageClass, the monitoring objects;
  - the Grafana dashboard names only metrics and labels the Go code defines;
  - the examples (fake credentials, references that resolve);
  - the chart refuses bad values with a message naming the problem (REFUSALS);
  - every value has a row in deploy/README.md's "Chart values" table.
"""

import copy
import json
import os
import re
import subprocess
import sys
import tempfile

import yaml

DRIVER = "cachefs.epochfs.io"
NAMESPACE = "epochfs-system"
# The only registry hosts any file of deploy/ may name: the EpochFS image's
# default (image.registry) and the kubernetes-csi sidecars' upstream one.
KNOWN_REGISTRIES = {"ghcr.io", "registry.k8s.io"}
DRIVER_BIN = "/usr/local/bin/csi-driver"

# Chart renderings: name -> values over values.yaml ("@test" = VALUES_TEST_FILE).
VARIANTS = {
    "helm default values": {},
    "helm test values": "@test",
    "helm mounter.enabled=false": {"mounter": {"enabled": False}, "node": {"updateStrategy": {"type": "OnDelete"}}},
    "helm controller.enabled=true": {"controller": {"enabled": True}},
    # Compared with the kustomize base + job-controller, which names no network
    # rule: the chart wants the admin's explicit "any network source" for that.
    "helm jobController.enabled=true": {"jobController": {"enabled": True}, "node": {"allowAnyNetworkSource": True}},
    # Tenants choose sources (inline volumes, TrainingJobs) within rules.
    "helm tenants with rules": {"node": {"inlineVolumes": True,
                                         "networkRules": ["s3://datasets?endpoint=https://s3.example:443"]},
                                "jobController": {"enabled": True}},
    "helm upstream sidecars": {"sidecars": {"builtin": False}, "controller": {"enabled": True, "provisioner": "sidecar"}},
    "helm one mirror": {"global": {"imageRegistry": "mirror/all"}, "controller": {"enabled": True, "provisioner": "sidecar"},
                        "sidecars": {"builtin": False}},
    # The built-in provisioner on the node's network, reading provisioner secrets in two namespaces.
    "helm provisioner secrets": {"controller": {"enabled": True, "hostNetwork": True,
                                               "secretNamespaces": ["epochfs-system", "team-a"]}},
    # Cluster scope: the node plugin's peer flags, HOST_IP, the token Secret in both containers, the same Role.
    "helm node.clusterCache.enabled=true": {"node": {"hostNetwork": True, "clusterCache": {
        "enabled": True, "tokenSecretName": "epochfs-peer-token"}}},
    # The test values have the ServiceMonitor; this the PodMonitor, without the Service,
    # beside the other workloads' pods (which it must not select).
    "helm podMonitor": {"metrics": {"service": {"create": False},
                                    "podMonitor": {"enabled": True, "interval": "", "scrapeTimeout": "",
                                                   "labels": {"prometheus": "main"}},
                                    "grafanaDashboard": {"enabled": True}},
                        "controller": {"enabled": True}, "jobController": {"enabled": True},
                        "node": {"allowAnyNetworkSource": True}},
}

# --set arguments the chart must refuse, and a fragment of the message it must give.
REFUSALS = [
    (["image.tag=latest"], "pin an exact tag"),
    (["image.tag="], "/image/tag"),
    (["controller.enabled=true", "controller.provisioner=sidecar", "sidecars.provisioner.tag=latest"], "pin an exact tag"),
    (["controller.enabled=true", "controller.provisioner=csi-provisioner"], "/controller/provisioner"),
    (["controller.enabled=true", "controller.leaderElection.leaseDuration=15"], "/controller/leaderElection/leaseDuration"),
    (["controller.enabled=true", "controller.secretNamespaces={Team_A}"], "/controller/secretNamespaces/0"),
    (["image.pullPolicy=Sometimes"], "/image/pullPolicy"),
    (["storageClass.create=true"], "needs controller.enabled=true"),
    (["storageClass.create=true", "controller.enabled=true"], "parameters.source is empty"),
    (["node.allowedLocalRoots={/}"], "whole file system"),
    (["node.allowedLocalRoots={relative/dir}"], "/node/allowedLocalRoots/0"),
    (["node.allowedLocalRoots={/mnt/data/}"], "write it clean"),
    (["node.allowedLocalRoots={/var/lib}"], "overlaps cacheRoot"),
    (["node.allowedLocalRoots={/var/lib/kubelet/pods}"], "overlaps kubeletDir"),
    (["node.allowedLocalRoots={/mnt/nvme/state}", "stateDir=/mnt/nvme/state"], "overlaps stateDir"),
    (["node.allowedLocalRoots={/proc/1/root}"], "overlaps /proc"),
    (["node.networkRules={http://example/x}"], "/node/networkRules/0"),
    (["node.inlineVolumes=true"], "node.allowAnyNetworkSource=true"),
    (["jobController.enabled=true"], "node.networkRules is empty"),
    (["node.inlineVolumes=true", "node.allowAnyNetworkSource=yes"], "/node/allowAnyNetworkSource"),
    (["node.maxCacheSize=lots"], "/node/maxCacheSize"),
    (["node.maxCacheSize=500m"], "/node/maxCacheSize"),      # milli in Kubernetes quantities: units.ParseSize refuses it
    (["node.inlineMaxCacheSize=0.5Ki"], "/node/inlineMaxCacheSize"),
    (["node.cacheRootBudget=50.5%"], "/node/cacheRootBudget"),  # csi.ParseCacheBudget: whole percentages only
    (["node.cacheRootBudget=120%"], "/node/cacheRootBudget"),
    (["node.namespaceMaxCacheBytes=101%"], "/node/namespaceMaxCacheBytes"),
    (["node.clusterCache.enabled=true", "node.clusterCache.tokenSecretName=t"], "needs node.hostNetwork"),
    (["node.clusterCache.enabled=true", "node.hostNetwork=true"], "needs node.clusterCache.tokenSecretName"),
    (["node.clusterCache.peerPortRange=7400"], "/node/clusterCache/peerPortRange"),
    (["node.cacheRootBudget=80"], "/node/cacheRootBudget"),
    (["node.maxMounts=0"], "/node/maxMounts"),
    (["node.namespaceMaxMounts=0"], "/node/namespaceMaxMounts"),
    (["node.namespaceMaxCacheBytes=0%"], "/node/namespaceMaxCacheBytes"),
    (["node.inlineMaxCacheSize=lots"], "/node/inlineMaxCacheSize"),
    (["jobController.podServiceAccounts={Admin_SA}"], "/jobController/podServiceAccounts"),
    (["node.updateStrategy.type=RollingOut"], "/node/updateStrategy"),
    (["mounter.updateStrategy.type=RollingOut"], "/mounter/updateStrategy"),
    (["mounter.enabled=false"], "set node.updateStrategy.type=OnDelete"),
    (["mounter.image.tag=latest"], "pin an exact tag"),
    (["node.tolerration=x"], "'tolerration' not allowed"),
    (["node.resources.limits.memory=much"], "/node/resources/limits/memory"),
    (["metrics.port=0"], "/metrics/port"),
    (["metrics.serviceMonitor.enabled=true", "metrics.podMonitor.enabled=true"], "enable one"),
    (["metrics.serviceMonitor.enabled=true", "metrics.service.create=false"], "needs metrics.service.create=true"),
    (["metrics.podMonitor.interval=30"], "/metrics/podMonitor/interval"),
    (["metrics.serviceMonitor.relabelings[0].action=Labelmap"], "/metrics/serviceMonitor/relabelings/0/action"),
    (["metrics.serviceMonitor.labels.release=1"], "/metrics/serviceMonitor/labels/release"),
    (["metrics.grafanaDashboard.enable=true"], "'enable' not allowed"),
    (["logFormat=xml"], "/logFormat"),
    (["kubeletDir=var/lib/kubelet"], "/kubeletDir"),
    (["healthInterval=30"], "/healthInterval"),
    (["jobController.serviceAccount.annotations.a=1"], "/jobController/serviceAccount/annotations/a"),
]

failures = []


def fail(where, msg):
    failures.append(f"{where}: {msg}")


# --- loading ---------------------------------------------------------------------------

def parse(where, text):
    """A multi-document YAML stream of objects (the API server validates them: dry run, e2e)."""
    objs = [d for d in yaml.safe_load_all(text) if d is not None]
    if len({key(o) for o in objs}) != len(objs) or not objs:
        fail(where, "renders no objects, or one object twice")
    return objs


def key(o):
    return (o["kind"], o["metadata"].get("namespace") or "", o["metadata"]["name"])


def fmt(k):
    return f"{k[0]} {k[1] + '/' if k[1] else ''}{k[2]}"


def find(objs, kind, name=None):
    return [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def one(where, objs, kind, name):
    found = find(objs, kind, name)
    if len(found) != 1:
        fail(where, f"expected exactly one {kind} {name}, found {len(found)}")
        return None
    return found[0]


def pod_specs(objs):
    """(object, pod spec) for every object that is or templates a pod."""
    for o in objs:
        if o["kind"] == "Pod":
            yield o, o.get("spec") or {}
        elif o["kind"] in ("Deployment", "DaemonSet", "StatefulSet", "Job"):
            yield o, o["spec"]["template"]["spec"]


def containers(pod):
    return (pod.get("initContainers") or []) + (pod.get("containers") or [])


def by_name(pod):
    return {c.get("name"): c for c in containers(pod)}


def args_of(c):
    return list(c.get("command") or []) + list(c.get("args") or [])


def flag(c, name):
    """The values given as --name=V in c's command and args."""
    return [a.split("=", 1)[1] for a in args_of(c) if a.startswith(f"--{name}=")]


def merge(base, over):
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = merge(base.get(k), v)
        return out
    return over


# --- images ----------------------------------------------------------------------------

def image_host(ref):
    """The registry host of an image reference ('' if none), by the distribution rules: the
    first component is a host only if it has '.' or ':' or is 'localhost'."""
    first = ref.split("/", 1)[0] if "/" in ref else ""
    return first if ("." in first or ":" in first or first == "localhost") else ""


def want_image(v, registry, repository, tag):
    """The chart's epochfs.image helper, as the values decide it."""
    if v["global"]["localImages"]:
        registry = ""
    elif v["global"]["imageRegistry"]:
        registry = v["global"]["imageRegistry"]
    registry = (registry or "").rstrip("/")
    return f"{registry + '/' if registry else ''}{repository}:{tag}"


def want_images(v):
    """Container name -> the image the values give it."""
    driver = want_image(v, v["image"]["registry"], v["image"]["repository"], v["image"]["tag"])
    side = {k: want_image(v, v["sidecars"]["registry"], s["repository"], s["tag"])
            for k, s in v["sidecars"].items() if isinstance(s, dict)}
    mounter = want_image(v, v["image"]["registry"], v["image"]["repository"],
                         v["mounter"]["image"]["tag"] or v["image"]["tag"])
    return {"csi-driver": driver, "mounter": mounter, "job-controller": driver,
            "node-driver-registrar": driver if v["sidecars"]["builtin"] else side["nodeDriverRegistrar"],
            "liveness-probe": side["livenessProbe"], "csi-provisioner": side["provisioner"]}


def check_images(where, objs):
    """Every image pinned, from no registry or a known one (kustomize trees and examples)."""
    for o, pod in pod_specs(objs):
        for c in containers(pod):
            img, w = c.get("image") or "", f"{where}: {fmt(key(o))} container {c.get('name')}"
            ref = img.split("@", 1)[0]
            tag = ref.rsplit("/", 1)[-1].partition(":")[2]
            if "@" not in img and tag in ("", "latest"):
                fail(w, f"image {img!r} is not pinned (empty tag or 'latest')")
            if image_host(img) and image_host(img) not in KNOWN_REGISTRIES:
                fail(w, f"image {img!r} names registry {image_host(img)!r}, not one of {sorted(KNOWN_REGISTRIES)}")


HOSTLIKE_IMAGE = re.compile(
    r"(?<![\w.-])([a-z0-9-]+(?:\.[a-z0-9-]+)+(?::[0-9]+)?)/(?:sig-storage|epochfs|kubernetes-csi|pytorch)/")
IMAGE_KEYS = re.compile(r"^\s*-?\s*(image|registry|imageRegistry|repository|newName)\s*:\s*\"?([^\s\"#]+)")


def scan_sources(root):
    """No registry host other than the known ones in any file of deploy/ or scripts/deploy-check.sh."""
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
            hosts = [m.group(1) for m in HOSTLIKE_IMAGE.finditer(line)]
            m = IMAGE_KEYS.match(line)
            if m and "{{" not in line:
                val = m.group(2)
                hosts.append(val.split("/")[0] if m.group(1).endswith("egistry") and "." in val.split("/")[0]
                             else image_host(val))
            for h in hosts:
                if h and h not in KNOWN_REGISTRIES:
                    fail(f"{rel}:{n}", f"names registry host {h!r}, not one of {sorted(KNOWN_REGISTRIES)}")


# --- the install -----------------------------------------------------------------------

def check_install(where, objs, v):
    """Everything the driver relies on, with the expectations derived from the values v."""
    check_node_pods(where, objs, v)
    check_controller(where, objs, v)
    check_rbac(where, objs)
    check_security(where, objs, v)
    check_scheduling(where, objs, v)
    check_images(where, objs)
    images = want_images(v)
    for o, pod in pod_specs(objs):
        for c in containers(pod):
            if c.get("image") != images.get(c.get("name")):
                fail(f"{where}: {fmt(key(o))} container {c.get('name')}",
                     f"image {c.get('image')!r}, want {images.get(c.get('name'))!r}")
            r = c.get("resources") or {}
            if not (r.get("requests") or {}).get("memory") or not (r.get("limits") or {}).get("memory"):
                fail(f"{where}: {fmt(key(o))} container {c.get('name')}", "needs memory requests and limits")
            if c.get("imagePullPolicy") != ("Never" if v["global"]["localImages"] else v["image"]["pullPolicy"]):
                fail(f"{where}: {fmt(key(o))} container {c.get('name')}",
                     f"imagePullPolicy {c.get('imagePullPolicy')!r} is not what the values say")
    s = one(where, objs, "Service", "epochfs-metrics") if v["metrics"]["service"]["create"] else None
    if s and ([(p.get("port"), p.get("targetPort")) for p in s["spec"]["ports"]] != [(v["metrics"]["port"], "metrics")]
              or s["spec"].get("selector") != {"app.kubernetes.io/name": "epochfs", "app.kubernetes.io/component": "node"}):
        fail(where, "Service epochfs-metrics must select the node plugin pods, port metrics.port -> metrics")
    check_monitoring(where, objs, v)


def node_args(v):
    """The csi-driver --mode=node arguments for values the e2e does not set (the source
    policy, limits, logging); the paths, endpoints and ports it sets, and a wrong one fails it."""
    roots, rules = v["node"]["allowedLocalRoots"], v["node"]["networkRules"]
    return {"allowed-local-roots": [",".join(roots)] if roots else [],
            "network-rules": [",".join(rules)] if rules else [],
            "allow-node-credentials": [str(v["node"]["allowNodeCredentials"]).lower()],
            "allow-inline-volumes": [str(v["node"]["inlineVolumes"]).lower()],
            "max-cache-size": [v["node"]["maxCacheSize"]],
            "cache-root-budget": [v["node"]["cacheRootBudget"]], "max-mounts": [str(v["node"]["maxMounts"])],
            "max-namespace-cache-bytes": [v["node"]["namespaceMaxCacheBytes"]],
            "max-namespace-mounts": [str(v["node"]["namespaceMaxMounts"])],
            "max-inline-cache-size": [v["node"]["inlineMaxCacheSize"]],
            "cache-retention": [v["node"]["cacheRetention"]],
            "allow-disk-secrets": [str(v["node"]["allowDiskSecrets"]).lower()],
            "mount-log-max-size": [v["node"]["mountLogMaxSize"]], "log-format": [v["logFormat"]]}


def check_node_pods(where, objs, v):
    """DaemonSets epochfs-node and epochfs-mounter (main compares mounter.enabled=false): hostNetwork only
    with node.hostNetwork; exactly these hostPaths, each container mounting exactly its own,
    at the host path (kubelet and the state files name host paths) unless noted, local roots
    read-only; the mounter without API access or probes; the values the e2e does not set."""
    kubelet = v["kubeletDir"].rstrip("/")
    plugin_dir, reg_dir = f"{kubelet}/plugins/{DRIVER}", f"{kubelet}/plugins_registry"
    builtin, roots = v["sidecars"]["builtin"], v["node"]["allowedLocalRoots"]
    types = {kubelet: "Directory", plugin_dir: "DirectoryOrCreate", reg_dir: "Directory",
             v["stateDir"]: "DirectoryOrCreate", v["cacheRoot"]: "DirectoryOrCreate", "/dev/fuse": "CharDevice",
             **{r: "Directory" for r in roots}}
    fuse = {v["stateDir"]: (v["stateDir"], "Bidirectional", None), v["cacheRoot"]: (v["cacheRoot"], None, None),
            "/dev/fuse": ("/dev/fuse", None, None), **{r: (r, "HostToContainer", True) for r in roots}}
    csi = {plugin_dir: ("/csi", None, None)}
    node_mounts = {"csi-driver": {**csi, kubelet: (kubelet, "Bidirectional", None), **fuse},
                   "node-driver-registrar": {**csi, reg_dir: ("/registration", None, None)},
                   **({} if builtin else {"liveness-probe": csi})}
    for name, section, mounts in (("epochfs-node", "node", node_mounts), ("epochfs-mounter", "mounter", {"mounter": fuse})):
        ds = one(where, objs, "DaemonSet", name) if section == "node" or v["mounter"]["enabled"] else None
        if not ds:
            continue
        w, pod = f"{where}: DaemonSet {name}", ds["spec"]["template"]["spec"]
        if bool(pod.get("hostNetwork")) != bool(v["node"].get("hostNetwork")):
            fail(w, f"hostNetwork is {pod.get('hostNetwork')!r}, but node.hostNetwork is {v['node'].get('hostNetwork')!r} "
                    "(the node's network is an explicit admin choice)")
        us = v[section]["updateStrategy"]
        if ds["spec"].get("updateStrategy") != ({"type": "OnDelete"} if us["type"] == "OnDelete" else us):
            fail(w, f"updateStrategy {ds['spec'].get('updateStrategy')} is not {section}.updateStrategy")
        if pod.get("terminationGracePeriodSeconds") != v[section]["terminationGracePeriodSeconds"]:
            fail(w, f"terminationGracePeriodSeconds is not {section}.terminationGracePeriodSeconds")
        cs = by_name(pod)
        if set(cs) != set(mounts):
            fail(w, f"containers {sorted(cs)}, want {sorted(mounts)}")
            continue
        vols = {x["name"]: x.get("hostPath") for x in pod.get("volumes") or []}
        want_vols = {p: types[p] for m in mounts.values() for p in m}
        got_vols = {hp["path"]: hp.get("type") for hp in vols.values() if hp}
        if got_vols != want_vols or len([x for x in vols.values() if x]) != len(want_vols):
            fail(w, f"hostPath volumes {got_vols}, want exactly {want_vols}")
        # Besides the hostPaths: only the peer token's Secret (mode 0400), and only with node.clusterCache.enabled.
        cc = v["node"].get("clusterCache") or {}
        want_other = {"peer-token": {"secretName": cc.get("tokenSecretName"), "defaultMode": 0o400}} if cc.get("enabled") else {}
        other = {x["name"]: x.get("secret") for x in pod.get("volumes") or [] if not x.get("hostPath")}
        if other != want_other:
            fail(w, f"volumes other than hostPaths {other}, want exactly {want_other}")
        for cname, c in cs.items():
            got = {vols[m["name"]]["path"]: (m.get("mountPath"), m.get("mountPropagation"), m.get("readOnly"))
                   for m in c.get("volumeMounts") or [] if vols.get(m.get("name"))}
            if got != mounts[cname]:
                fail(w, f"container {cname} mounts hostPaths {got}, want exactly {mounts[cname]}")
        if section == "node":
            check_node_containers(w, cs, v, plugin_dir)
            continue
        mnt = cs["mounter"]
        if pod.get("automountServiceAccountToken") is not False or pod.get("serviceAccountName"):
            fail(w, "needs no Kubernetes API access: automountServiceAccountToken false, no serviceAccountName")
        for probe in ("livenessProbe", "startupProbe"):
            if probe in mnt:
                fail(w, f"mounter must have no {probe}: restarting it stalls every mount on the node")
        # Readiness: every mount of the node is this mounter's child (a rolling update deletes the old
        # pod only then); the probe's own bound (5 s) must fit in its timeout.
        rp = mnt.get("readinessProbe") or {}
        want_cmd = ["/usr/local/bin/csi-driver", "--mode=probe-mounter",
                    f"--mounter-endpoint=unix://{v['stateDir'].rstrip('/')}/mounter.sock"]
        if (rp.get("exec") or {}).get("command") != want_cmd or rp.get("timeoutSeconds", 1) <= 5:
            fail(w, f"mounter readinessProbe must exec {want_cmd} with timeoutSeconds > 5, got {rp}")
        if flag(mnt, "log-format") != [v["logFormat"]] or mnt.get("resources") != v["mounter"]["resources"] \
                or (mnt.get("env") or []) != v["node"]["extraEnv"]:
            fail(w, "mounter --log-format, resources and env must be logFormat, mounter.resources, node.extraEnv")


def check_node_containers(w, cs, v, plugin_dir):
    drv = cs["csi-driver"]
    for f, want in node_args(v).items():
        if flag(drv, f) != want:
            fail(w, f"csi-driver --{f}: got {flag(drv, f)}, want {want}")
    if drv.get("resources") != (v["node"] if v["mounter"]["enabled"] else v["mounter"])["resources"]:
        fail(w, "csi-driver resources must be node.resources (mounter.resources without the mounter)")
    if v["sidecars"]["builtin"]:
        return  # the e2e installs the builtin sidecars: registration, probes and ports work there
    # The upstream sidecars, which the e2e does not install: their arguments and probe wiring.
    probe_port = (drv.get("livenessProbe") or {}).get("httpGet", {}).get("port")
    ports = {p["name"]: p["containerPort"] for p in drv.get("ports") or []}
    if probe_port != "healthz" or flag(cs["liveness-probe"], "health-port") != [str(ports.get("healthz"))] \
            or ports.get("healthz") != v["sidecars"]["livenessProbe"]["healthPort"]:
        fail(w, "upstream sidecars: csi-driver's liveness probe must use the livenessprobe sidecar's port")
    reg, health = cs["node-driver-registrar"], v["sidecars"]["nodeDriverRegistrar"]["healthPort"]
    for f, x in {"csi-address": ["/csi/csi.sock"], "kubelet-registration-path": [f"{plugin_dir}/csi.sock"],
                 "http-endpoint": [f":{health}"]}.items():
        if flag(reg, f) != x:
            fail(w, f"node-driver-registrar --{f}: got {flag(reg, f)}, want {x}")
    if (reg.get("livenessProbe") or {}).get("httpGet", {}).get("port") != "registrar" or \
            {p["name"]: p["containerPort"] for p in reg.get("ports") or []}.get("registrar") != health:
        fail(w, "node-driver-registrar's liveness probe must use its registrar port (healthPort)")


def check_controller(where, objs, v):
    ctl = find(objs, "Deployment", "epochfs-controller")
    names = {(o["kind"], o["metadata"]["name"]) for o in objs}
    ctl_objs = {("Deployment", "epochfs-controller"), ("ServiceAccount", "epochfs-controller"),
                ("ClusterRole", "epochfs-controller"), ("ClusterRoleBinding", "epochfs-controller"),
                ("Role", "epochfs-controller-leader-election"), ("RoleBinding", "epochfs-controller-leader-election")}
    if not v["controller"]["enabled"]:
        if names & ctl_objs:
            fail(where, f"controller.enabled=false renders {sorted(names & ctl_objs)}")
        return
    if ctl_objs - names:
        fail(where, f"controller.enabled=true lacks {sorted(ctl_objs - names)}")
    if not ctl:
        return
    d, w = ctl[0], f"{where}: Deployment epochfs-controller"
    if d["spec"].get("replicas") != v["controller"]["replicas"]:
        fail(w, "replicas is not controller.replicas")
    pod = d["spec"]["template"]["spec"]
    cs = by_name(pod)
    sidecar = v["controller"]["provisioner"] == "sidecar"
    upstream_probe = sidecar and not v["sidecars"]["builtin"]
    want = {"csi-driver"} | ({"csi-provisioner"} if sidecar else set()) | ({"liveness-probe"} if upstream_probe else set())
    if set(cs) != want or pod.get("serviceAccountName") != "epochfs-controller":
        fail(w, f"containers {sorted(cs)} (want {sorted(want)}), serviceAccountName epochfs-controller")
        return
    if bool(pod.get("hostNetwork")) != bool(v["controller"]["hostNetwork"]):
        fail(w, "hostNetwork is not controller.hostNetwork")
    drv = cs["csi-driver"]
    roots, rules = v["node"]["allowedLocalRoots"], v["node"]["networkRules"]
    want_flags = {"mode": ["controller" if sidecar else "provisioner"], "state-dir": ["/var/lib/epochfs/state"],
                  "kubelet-dir": [v["kubeletDir"].rstrip("/")], "cache-root": [v["cacheRoot"]],
                  "max-cache-size": [v["node"]["maxCacheSize"]],
                  "allowed-local-roots": [",".join(roots)] if roots else [],
                  "network-rules": [",".join(rules)] if rules else [],
                  "metrics-addr": [f"0.0.0.0:{v['controller']['metricsPort']}"]}
    if not sidecar:
        le = v["controller"]["leaderElection"]
        want_flags.update({"leader-election": ["true"], "namespace": ["$(POD_NAMESPACE)"],
                           "leader-election-lease-duration": [le["leaseDuration"]],
                           "leader-election-renew-deadline": [le["renewDeadline"]],
                           "leader-election-retry-period": [le["retryPeriod"]]})
    for f, x in want_flags.items():
        if flag(drv, f) != x:
            fail(w, f"csi-driver --{f}: got {flag(drv, f)}, want {x}")
    if not any(m.get("mountPath") == "/var/lib/epochfs/state" for m in drv.get("volumeMounts") or []):
        fail(w, "csi-driver needs a writable --state-dir volume")
    if not sidecar and any(x.get("name") == "socket-dir" for x in pod.get("volumes") or []):
        fail(w, "the built-in provisioner has no CSI socket: no socket-dir volume")
    if sidecar:
        prov = cs["csi-provisioner"]
        for a in ("--csi-address=/csi/csi.sock", "--extra-create-metadata", "--leader-election",
                  f"--timeout={v['sidecars']['provisioner']['timeout']}"):
            if a not in args_of(prov):
                fail(w, f"csi-provisioner lacks argument {a!r} (has {args_of(prov)})")
    port = (drv.get("livenessProbe") or {}).get("httpGet", {}).get("port")
    if port != ("healthz" if upstream_probe else "metrics"):
        fail(w, f"csi-driver's liveness probe port {port!r} does not follow controller.provisioner and sidecars.builtin")
    secret_roles = {o["metadata"].get("namespace") for o in find(objs, "Role", "epochfs-controller-secrets")}
    secret_bindings = {o["metadata"].get("namespace") for o in find(objs, "RoleBinding", "epochfs-controller-secrets")}
    if secret_roles != set(v["controller"]["secretNamespaces"]) or secret_bindings != secret_roles:
        fail(where, f"Roles epochfs-controller-secrets in {sorted(secret_roles)} (bindings {sorted(secret_bindings)}), "
                    f"want controller.secretNamespaces {v['controller']['secretNamespaces']}")


def check_rbac(where, objs):
    # The one Secret access: get (no list, no watch) in each namespace of controller.secretNamespaces,
    # for the provisioner's provisioner secrets (Role epochfs-controller-secrets).
    want_secrets = [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]
    for o in find(objs, "ClusterRole") + find(objs, "Role"):
        if o["kind"] == "Role" and o["metadata"]["name"] == "epochfs-controller-secrets":
            if o.get("rules") != want_secrets:
                fail(where, f"{fmt(key(o))} must grant exactly {want_secrets}, got {o.get('rules')}")
            continue
        for r in o.get("rules") or []:
            if {"secrets", "*"} & set(r.get("resources") or []) or "*" in (r.get("verbs") or []) \
                    or "*" in (r.get("apiGroups") or []):
                fail(where, f"{fmt(key(o))} grants {r}: no Secrets access and no wildcards")
    # The node plugin has no access to Nodes (issue 22): a Role on Leases of its own namespace only
    # (its cache-location Lease and, with the cluster cache, its peer Leases), and one ClusterRole,
    # epochfs-node-events, that may create/patch events and nothing else (ListingRefused on pods).
    if find(objs, "ClusterRole", "epochfs-node") or find(objs, "ClusterRoleBinding", "epochfs-node"):
        fail(where, "the node plugin must have no ClusterRole (no Node access): a Role on leases only")
    events = one(where, objs, "ClusterRole", "epochfs-node-events")
    want_events = [{"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]}]
    if events and events.get("rules") != want_events:
        fail(where, f"ClusterRole epochfs-node-events must grant exactly {want_events}, got {events.get('rules')}")
    binding = one(where, objs, "ClusterRoleBinding", "epochfs-node-events")
    if binding and (binding.get("roleRef", {}).get("name") != "epochfs-node-events"
                    or [s.get("name") for s in binding.get("subjects") or []] != ["epochfs-node"]):
        fail(where, f"ClusterRoleBinding epochfs-node-events must bind ClusterRole epochfs-node-events to epochfs-node only: {binding}")
    for b in find(objs, "ClusterRoleBinding"):
        if b["metadata"]["name"] != "epochfs-node-events" and \
                any(s.get("name") == "epochfs-node" for s in b.get("subjects") or []):
            fail(where, f"{fmt(key(b))}: the node plugin's only ClusterRoleBinding is epochfs-node-events")
    node = one(where, objs, "Role", "epochfs-node")
    want = [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
             "verbs": ["get", "list", "watch", "create", "update", "delete"]}]
    if node and node.get("rules") != want:
        fail(where, f"Role epochfs-node must grant exactly {want}, got {node.get('rules')}")
    if node and node["metadata"].get("namespace", NAMESPACE) != NAMESPACE:
        fail(where, f"Role epochfs-node must live in {NAMESPACE}")
    for o in find(objs, "ClusterRole") + find(objs, "Role"):
        for r in o.get("rules") or []:
            if "nodes" in (r.get("resources") or []) and {"patch", "update", "create", "delete"} & set(r.get("verbs") or []):
                fail(where, f"{fmt(key(o))} may write Nodes: {r}")
    for ctl in find(objs, "ClusterRole", "epochfs-controller"):
        granted = {res for r in ctl.get("rules") or [] for res in r.get("resources") or []}
        if granted - {"persistentvolumes", "persistentvolumeclaims", "storageclasses", "events"}:
            fail(where, f"ClusterRole epochfs-controller grants more than csi-provisioner needs: {sorted(granted)}")
    for le in find(objs, "Role", "epochfs-controller-leader-election"):
        if {res for r in le.get("rules") or [] for res in r.get("resources") or []} != {"leases"}:
            fail(where, "Role epochfs-controller-leader-election must grant leases only")
    for b in find(objs, "ClusterRoleBinding") + find(objs, "RoleBinding"):
        for s in b.get("subjects") or []:
            if s.get("kind") != "ServiceAccount" or s.get("namespace") != NAMESPACE:
                fail(where, f"{fmt(key(b))}: subject {s} must be a ServiceAccount of {NAMESPACE}")


# The only containers that may be privileged, add capabilities, or mount with
# Bidirectional propagation: they make FUSE mounts that must reach the host.
PRIVILEGED = {("DaemonSet", "epochfs-node", "csi-driver"), ("DaemonSet", "epochfs-mounter", "mounter")}


def check_security(where, objs, v):
    for o, pod in pod_specs(objs):
        # The job controller may share the node's network only when jobController.hostNetwork says so.
        job_net = o["kind"] == "Deployment" and (
            (o["metadata"]["name"] == "epochfs-job-controller" and bool((v.get("jobController") or {}).get("hostNetwork")))
            or (o["metadata"]["name"] == "epochfs-controller" and bool((v.get("controller") or {}).get("hostNetwork"))))
        if o["kind"] != "DaemonSet" and (pod.get("hostPID") or (pod.get("hostNetwork") and not job_net) or pod.get("hostIPC")
                                         or any("hostPath" in x for x in pod.get("volumes") or [])):
            fail(where, f"{fmt(key(o))}: only the node plugin and the mounter may use hostPID/hostNetwork/hostIPC/hostPath "
                        "(the controllers hostNetwork only with jobController.hostNetwork / controller.hostNetwork)")
        for c in containers(pod):
            sc = c.get("securityContext") or {}
            if (o["kind"], o["metadata"]["name"], c.get("name")) in PRIVILEGED:
                if sc.get("privileged") is not True:
                    fail(where, f"{fmt(key(o))} container {c['name']} must be privileged (FUSE mounts, propagation)")
                continue
            if sc.get("privileged") or (sc.get("capabilities") or {}).get("add") or \
                    any(m.get("mountPropagation") == "Bidirectional" for m in c.get("volumeMounts") or []):
                fail(where, f"{fmt(key(o))} container {c.get('name')} must not be privileged, add capabilities "
                            "or mount Bidirectional")
            if args_of(c)[:1] in ([DRIVER_BIN], ["/usr/local/bin/job-controller"]) and not (
                    sc.get("allowPrivilegeEscalation") is False and
                    (sc.get("capabilities") or {}).get("drop") == ["ALL"]):
                fail(where, f"{fmt(key(o))} container {c.get('name')} must drop ALL capabilities and "
                            "allowPrivilegeEscalation: false")


WORKLOADS = [("DaemonSet", "epochfs-node", "node"), ("DaemonSet", "epochfs-mounter", "node"),
             ("Deployment", "epochfs-controller", "controller"),
             ("Deployment", "epochfs-job-controller", "jobController")]


def check_scheduling(where, objs, v):
    """Each workload's scheduling values, pod annotations and ServiceAccount annotations reach it."""
    for kind, name, section in WORKLOADS:
        vs = v[section]
        for o in find(objs, kind, name):
            pod, w = o["spec"]["template"]["spec"], f"{where}: {kind} {name}"
            got = {"nodeSelector": pod.get("nodeSelector") or {}, "tolerations": pod.get("tolerations") or [],
                   "affinity": pod.get("affinity") or {}, "priorityClassName": pod.get("priorityClassName") or "",
                   "podAnnotations": o["spec"]["template"]["metadata"].get("annotations") or {},
                   "imagePullSecrets": pod.get("imagePullSecrets") or []}
            want = {k: vs[k] for k in got if k in vs}
            want["imagePullSecrets"] = v["imagePullSecrets"]
            if name == "epochfs-mounter":
                want["podAnnotations"] = {}  # node.podAnnotations are the node plugin's (scrape annotations)
            for k in want:
                if got[k] != want[k]:
                    fail(w, f"{k}: got {got[k]!r}, want {want[k]!r} ({section}.{k})")
            if section == "jobController":
                jc = by_name(pod).get("job-controller", {})
                if jc.get("resources") != vs["resources"]:
                    fail(w, "job-controller resources are not jobController.resources")
                for f, value in (("allowed-local-roots", "allowedLocalRoots"), ("network-rules", "networkRules")):
                    want_f = v["node"][value]
                    if flag(jc, f) != ([",".join(want_f)] if want_f else []):
                        fail(w, f"job-controller --{f} {flag(jc, f)} is not the nodes' ({want_f})")
            if section == "controller" and by_name(pod).get("csi-driver", {}).get("resources") != vs["resources"]:
                fail(w, "csi-driver resources are not controller.resources")
            if name == "epochfs-mounter":
                continue  # no ServiceAccount token (check_mounter)
            for sa in find(objs, "ServiceAccount", pod.get("serviceAccountName")):
                if (sa["metadata"].get("annotations") or {}) != vs["serviceAccount"]["annotations"]:
                    fail(w, f"ServiceAccount {sa['metadata']['name']} annotations are not {section}.serviceAccount.annotations")


# --- monitoring ------------------------------------------------------------------------

# The Grafana dashboard: deploy/grafana holds the file users import, the chart a copy it
# embeds in ConfigMap DASHBOARD_CONFIGMAP (metrics.grafanaDashboard.enabled); the two
# must be identical. Set by main.
DASHBOARD = os.path.join("deploy", "grafana", "epochfs-dashboard.json")
CHART_DASHBOARD = os.path.join("deploy", "helm", "epochfs", "dashboards", "epochfs-dashboard.json")
DASHBOARD_CONFIGMAP = "epochfs-grafana-dashboard"
dashboard_text = None
# The files that define every metric the node plugin serves (its own, epochfs_volume_info
# and, labelled dataset_key and dataset_id, every mount's cachefs_* and the memory series
# LABEL_SOURCE lists), and the one naming those labels.
METRIC_SOURCES = [os.path.join("pkg", "metrics", "metrics.go"), os.path.join("cmd", "csi-driver", "metrics.go"),
                  os.path.join("pkg", "peer", "metrics.go"), os.path.join("pkg", "mount", "metrics.go"),
                  os.path.join("pkg", "csi", "volumeinfo.go")]
LABEL_SOURCE = os.path.join("pkg", "csi", "mountmetrics.go")
# Target labels the dashboard may use besides the mounts' own: Prometheus's (job,
# instance), the operator's (pod, namespace), the node label the chart's monitors add.
TARGET_LABELS = {"job", "instance", "pod", "namespace", "node"}
NODE_POD_LABELS = {"app.kubernetes.io/name": "epochfs", "app.kubernetes.io/component": "node"}
NODE_RELABELING = {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node", "action": "replace"}


def selects(selector, labels):
    """Whether a matchLabels-only selector selects an object with these labels."""
    ml = (selector or {}).get("matchLabels") or {}
    return bool(ml) and all((labels or {}).get(k) == x for k, x in ml.items())


def check_monitoring(where, objs, v):
    """Scrape annotations, ServiceMonitor/PodMonitor and the dashboard ConfigMap, as metrics.* says:
    each monitor present only when enabled and reaching csi-driver's metrics port on the node pods."""
    m = v["metrics"]
    for s in find(objs, "Service", "epochfs-metrics"):
        got = {k: x for k, x in (s["metadata"].get("annotations") or {}).items() if k.startswith("prometheus.io/")}
        want = {"prometheus.io/scrape": "true", "prometheus.io/port": str(m["port"]),
                "prometheus.io/path": "/metrics"} if m["annotations"] else {}
        if got != want:
            fail(where, f"Service epochfs-metrics prometheus.io annotations {got}, want {want} "
                        f"(metrics.annotations={m['annotations']})")
    node_ports = {}
    for ds in find(objs, "DaemonSet", "epochfs-node"):
        for c in containers(ds["spec"]["template"]["spec"]):
            for p in c.get("ports") or []:
                node_ports[p.get("name")] = (c.get("name"), p.get("containerPort"))
    for kind, section, eps_key in (("ServiceMonitor", "serviceMonitor", "endpoints"),
                                   ("PodMonitor", "podMonitor", "podMetricsEndpoints")):
        mv, w = m[section], f"{where}: {kind} epochfs-node"
        if not mv["enabled"]:
            if find(objs, kind):
                fail(where, f"renders a {kind} with metrics.{section}.enabled=false")
            continue
        mon = one(where, objs, kind, "epochfs-node")
        if not mon:
            continue
        if mon["apiVersion"] != "monitoring.coreos.com/v1":
            fail(w, f"apiVersion {mon['apiVersion']!r}, want monitoring.coreos.com/v1")
        labels = mon["metadata"].get("labels") or {}
        if any(labels.get(k) != x for k, x in mv["labels"].items()):
            fail(w, f"labels {labels} lack metrics.{section}.labels {mv['labels']}")
        spec = mon.get("spec") or {}
        if spec.get("namespaceSelector") != {"matchNames": [NAMESPACE]}:
            fail(w, f"namespaceSelector must be matchNames [{NAMESPACE}], got {spec.get('namespaceSelector')}")
        eps = spec.get(eps_key) or []
        want = {"port": "metrics", "path": "/metrics", "scheme": "http", "honorLabels": True,
                "relabelings": [NODE_RELABELING] + mv["relabelings"]}
        want.update({k: mv[k] for k in ("interval", "scrapeTimeout", "metricRelabelings") if mv[k]})
        if eps != [want]:
            fail(w, f"{eps_key} {eps}, want [{want}]")
        # What it selects, and where its port leads: csi-driver's metrics port on the node pods.
        port = eps[0].get("port") if eps else None
        if kind == "ServiceMonitor":
            picked = [s for s in find(objs, "Service") if selects(spec.get("selector"), s["metadata"].get("labels"))]
            if [s["metadata"]["name"] for s in picked] != ["epochfs-metrics"]:
                fail(w, f"selects Services {[s['metadata']['name'] for s in picked]}, want [epochfs-metrics]")
                continue
            sp = [p for p in picked[0]["spec"].get("ports") or [] if p.get("name") == port]
            port = sp[0].get("targetPort") if sp else None
        else:
            picked = [o for o, _ in pod_specs(objs)
                      if selects(spec.get("selector"), o["spec"]["template"]["metadata"].get("labels")
                                 if o["kind"] != "Pod" else o["metadata"].get("labels"))]
            if [fmt(key(o)) for o in picked] != [f"DaemonSet {NAMESPACE}/epochfs-node"] or \
                    any(spec["selector"]["matchLabels"].get(k) != x for k, x in NODE_POD_LABELS.items()):
                fail(w, f"selects {[fmt(key(o)) for o in picked]}, want the node plugin pods only")
        if node_ports.get(port) != ("csi-driver", m["port"]):
            fail(w, f"port {port!r} is not csi-driver's metrics port {m['port']} on the node pods ({node_ports})")

    g = m["grafanaDashboard"]
    cms = find(objs, "ConfigMap", DASHBOARD_CONFIGMAP)
    if not g["enabled"]:
        if cms:
            fail(where, f"renders ConfigMap {DASHBOARD_CONFIGMAP} with metrics.grafanaDashboard.enabled=false")
        return
    cm = one(where, objs, "ConfigMap", DASHBOARD_CONFIGMAP)
    if not cm:
        return
    w, md = f"{where}: ConfigMap {DASHBOARD_CONFIGMAP}", cm["metadata"]
    if any((md.get("labels") or {}).get(k) != x for k, x in g["labels"].items()):
        fail(w, f"labels {md.get('labels')} lack metrics.grafanaDashboard.labels {g['labels']}")
    if md.get("namespace") != (g["namespace"] or NAMESPACE):
        fail(w, f"namespace {md.get('namespace')!r} is not metrics.grafanaDashboard.namespace")
    if (md.get("annotations") or {}) != g["annotations"]:
        fail(w, f"annotations {md.get('annotations')} are not metrics.grafanaDashboard.annotations")
    if cm.get("data") != {"epochfs-dashboard.json": dashboard_text}:
        fail(w, f"data must be exactly epochfs-dashboard.json: the content of {DASHBOARD}")


PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
                   "offset", "inf", "nan"}
GROUPING = r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)"


def promql_names(expr):
    """(metric names, label names) an expression uses. Strings, range/subquery brackets and
    grouping clauses are set aside; an identifier followed by "(" is a function."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    labels = set()
    for block in re.findall(r"\{([^}]*)\}", e):
        labels |= set(re.findall(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)", block))
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    for block in re.findall(GROUPING, e):
        labels |= set(re.findall(r"[A-Za-z_]\w*", block))
    e = re.sub(GROUPING, " ", e)
    metrics = set()
    for mt in re.finditer(r"(?<![\w.])[A-Za-z_:][\w:]*", e):
        name = mt.group(0)
        if e[mt.end():].lstrip().startswith("(") or name.lower() in PROMQL_KEYWORDS:
            continue
        metrics.add(name)
    return metrics, labels


def code_metrics(root):
    """The metric names the node plugin serves, as the Go code defines them (histograms as
    their _bucket/_sum/_count series), and the labels the mounts' metrics get."""
    names, hists, own_labels = set(), set(), set()
    for rel in METRIC_SOURCES:
        text = open(os.path.join(root, rel), encoding="utf-8").read()
        names |= set(re.findall(r'"((?:cachefs|epochfs)_[a-z0-9_]+)"', text))
        hists |= set(re.findall(r'HistogramOpts\{\s*Name:\s*"([a-z0-9_]+)"', text))
        # Collectors that build metrics at scrape time: a Desc field set from a name
        # (`field: d("name", …)`) and passed to MustNewConstHistogram is a histogram.
        fields = dict(re.findall(r'\b(\w+):\s*\w+\("((?:cachefs|epochfs)_[a-z0-9_]+)"', text))
        hists |= {fields[f] for f in re.findall(r'MustNewConstHistogram\(\s*\w+\.(\w+)', text) if f in fields}
        # ... or a package-level Desc (`stallDesc = prometheus.NewDesc("name", …)`).
        descs = dict(re.findall(r'\b(\w+)\s*=\s*prometheus\.NewDesc\(\s*"((?:cachefs|epochfs)_[a-z0-9_]+)"', text))
        hists |= {descs[f] for f in re.findall(r'MustNewConstHistogram\(\s*(\w+)\s*,', text) if f in descs}
        own_labels |= set(re.findall(r'\bLabel\w+\s*=\s*"([a-z_]+)"', text))
    series = (names - hists) | {h + s for h in hists for s in ("_bucket", "_sum", "_count")}
    text = open(os.path.join(root, LABEL_SOURCE), encoding="utf-8").read()
    labels = set(re.findall(r'\bLabel\w+\s*=\s*"([a-z_]+)"', text)) | own_labels
    # The mounts' memory series the node plugin re-exports (mountMemoryMetrics).
    memory = set(re.findall(r'"((?:process|go)_[a-z0-9_]+)":\s*true', text))
    if not memory:
        fail("deploy/check/check.py", f"found no mount memory series (mountMemoryMetrics) in {LABEL_SOURCE}")
    names |= memory
    series |= memory
    if len(names) < 10 or not hists or not {"dataset_id", "dataset_key"} <= labels:
        fail("deploy/check/check.py", f"found only metrics {sorted(names)}, histograms {sorted(hists)}, labels "
                                      f"{sorted(labels)} in {METRIC_SOURCES + [LABEL_SOURCE]}: fix code_metrics")
    return names, hists, series, labels


def dashboard_panels(panels):
    for p in panels or []:
        yield p
        yield from dashboard_panels(p.get("panels"))


def check_dashboard(root):
    """The Grafana dashboard: valid JSON, a current schemaVersion, a Prometheus datasource
    variable every panel and query uses, PromQL naming only metrics and labels the code
    defines, every metric the code defines shown, and the chart's copy identical."""
    global dashboard_text
    w = DASHBOARD
    try:
        dashboard_text = open(os.path.join(root, DASHBOARD), encoding="utf-8").read()
        d = json.loads(dashboard_text)
    except (OSError, ValueError) as e:
        fail(w, f"cannot load: {e}")
        return
    try:
        copy_text = open(os.path.join(root, CHART_DASHBOARD), encoding="utf-8").read()
    except OSError as e:
        copy_text = f"({e})"
    if copy_text != dashboard_text:
        fail(CHART_DASHBOARD, f"differs from {DASHBOARD}: cp {DASHBOARD} {CHART_DASHBOARD}")
    if not isinstance(d.get("schemaVersion"), int) or d["schemaVersion"] < 39:
        fail(w, f"schemaVersion {d.get('schemaVersion')!r}: export it from Grafana 11 or newer (39+)")
    if not d.get("uid") or not d.get("title"):
        fail(w, "needs a uid and a title")
    names, hists, series, mount_labels = code_metrics(root)
    variables = {x.get("name"): x for x in (d.get("templating") or {}).get("list") or []}
    dsv = variables.get("datasource") or {}
    if dsv.get("type") != "datasource" or dsv.get("query") != "prometheus":
        fail(w, "needs a datasource variable `datasource` of type prometheus")
    want_ds = {"type": "prometheus", "uid": "${datasource}"}
    allowed_labels = mount_labels | TARGET_LABELS | {"le"}
    known_vars = set(variables) | {"__rate_interval", "__interval", "__range", "__all"}
    used, ids = set(), set()

    def check_expr(where, expr):
        ms, ls = promql_names(expr)
        for name in sorted(ms - series):
            fail(where, f"{name!r} is not a metric the node plugin serves (see {', '.join(METRIC_SOURCES)})")
        for name in sorted(ls - allowed_labels):
            fail(where, f"label {name!r} is neither a mount label ({sorted(mount_labels)}) nor a target label")
        for var in re.findall(r"\$\{?(\w+)", expr):
            if var not in known_vars:
                fail(where, f"uses ${var}, which is no variable of the dashboard")
        used.update(ms)
        return ms

    for name, x in variables.items():
        if x.get("type") == "query":
            q = x.get("definition") or (x.get("query") or {}).get("query") or ""
            lv = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", q.strip())
            if x.get("datasource") != want_ds or not lv:
                fail(f"{w}: variable {name}", "must be a label_values(...) query on ${datasource}")
                continue
            check_expr(f"{w}: variable {name}", lv.group(1))
            if lv.group(2) not in allowed_labels:
                fail(f"{w}: variable {name}", f"label {lv.group(2)!r} is no label of the metrics")
    ratio = quantile = False
    for p in dashboard_panels(d.get("panels")):
        pw = f"{w}: panel {p.get('title')!r}"
        if p.get("id") in ids or not isinstance(p.get("id"), int):
            fail(pw, f"id {p.get('id')!r} is missing or not unique")
        ids.add(p.get("id"))
        if not p.get("gridPos"):
            fail(pw, "has no gridPos")
        if p.get("type") == "row":
            continue
        if p.get("datasource") != want_ds:
            fail(pw, f"datasource {p.get('datasource')}, want {want_ds}")
        if not p.get("targets"):
            fail(pw, "has no queries")
        for tg in p.get("targets") or []:
            tw = f"{pw} query {tg.get('refId')}"
            if tg.get("datasource") != want_ds:
                fail(tw, f"datasource {tg.get('datasource')}, want {want_ds}")
            expr = tg.get("expr") or ""
            ms = check_expr(tw, expr)
            if not ms:
                fail(tw, f"names no metric: {expr!r}")
            ratio |= {"cachefs_cache_hit_bytes_total", "cachefs_cache_miss_bytes_total"} <= ms
            quantile |= "histogram_quantile" in expr and any(h + "_bucket" in ms for h in hists)
    if not ratio or not quantile:
        fail(w, "needs the byte hit ratio (hit and miss bytes) and the backend latency quantiles")
    shown = {n for n in names - hists if n in used} | {h for h in hists if any(h + s in used for s in
                                                                                ("_bucket", "_sum", "_count"))}
    for name in sorted(names - shown):
        fail(w, f"metric {name} (defined in {', '.join(METRIC_SOURCES)}) is on no panel: add one")


# --- comparisons ------------------------------------------------------------------------

def diff(a, b, path=""):
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str)
                for d in ([f"{path}.{k}: only in the second"] if k not in a else
                          [f"{path}.{k}: only in the first"] if k not in b else diff(a[k], b[k], f"{path}.{k}"))]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in diff(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def compare(where, first, second, ignore_kinds=("Namespace",)):
    a = {key(o): o for o in first if o["kind"] not in ignore_kinds}
    b = {key(o): o for o in second if o["kind"] not in ignore_kinds}
    for x in sorted(set(a) ^ set(b)):
        fail(where, f"{fmt(x)} is rendered by only {'the first' if x in a else 'the second'}")
    for x in sorted(set(a) & set(b)):
        for d in diff(a[x], b[x]):
            fail(where, f"{fmt(x)} differs: {d}")


# --- examples ---------------------------------------------------------------------------

def check_examples(where, objs):
    check_images(where, objs)
    secrets = {(o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in find(objs, "Secret")}
    for s in secrets.values():
        data = s.get("stringData") or {}
        if s.get("data") or any("FAKE" not in str(data.get(k, "")) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")):
            fail(where, f"Secret {s['metadata']['name']}: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY must be "
                        "obviously fake stringData placeholders")

    def secret_ref(w, ns, name):
        if (ns, name) not in secrets:
            fail(w, f"refers to Secret {ns}/{name}, which the examples do not define")

    for sc in find(objs, "StorageClass") or fail(where, "no StorageClass example") or []:
        w, p = f"{where}: StorageClass {sc['metadata']['name']}", sc.get("parameters") or {}
        if sc.get("provisioner") != DRIVER or not p.get("source"):
            fail(w, f"needs provisioner {DRIVER} and parameters.source")
        secret_ref(w, p.get("csi.storage.k8s.io/node-stage-secret-namespace"),
                   p.get("csi.storage.k8s.io/node-stage-secret-name"))
        for k in p:
            if k not in ("source", "cacheSize", "manifest", "policy") and not k.startswith("csi.storage.k8s.io/"):
                fail(w, f"unknown parameter {k!r}")
    pvs = [pv for pv in find(objs, "PersistentVolume") if (pv["spec"].get("csi") or {}).get("driver") == DRIVER]
    for pv in pvs or fail(where, "no static PersistentVolume example") or []:
        w, csi = f"{where}: PersistentVolume {pv['metadata']['name']}", pv["spec"]["csi"]
        if not csi.get("volumeHandle") or not (csi.get("volumeAttributes") or {}).get("source") \
                or pv["spec"].get("accessModes") != ["ReadOnlyMany"]:
            fail(w, "needs volumeHandle, volumeAttributes.source and accessModes [ReadOnlyMany]")
        ref = csi.get("nodeStageSecretRef") or {}
        secret_ref(w, ref.get("namespace"), ref.get("name"))
    for pvc in find(objs, "PersistentVolumeClaim"):
        if pvc["spec"].get("accessModes") != ["ReadOnlyMany"]:
            fail(f"{where}: PersistentVolumeClaim {pvc['metadata']['name']}", "accessModes must be [ReadOnlyMany]")
    claims = {(o["metadata"].get("namespace"), o["metadata"]["name"]) for o in find(objs, "PersistentVolumeClaim")}
    used_pvc = inline = False
    for o, pod in pod_specs(objs):
        for vol in pod.get("volumes") or []:
            w = f"{where}: {fmt(key(o))} volume {vol.get('name')}"
            if "persistentVolumeClaim" in vol:
                used_pvc = True
                if (o["metadata"].get("namespace"), vol["persistentVolumeClaim"].get("claimName")) not in claims:
                    fail(w, "refers to a PVC the examples do not define")
            if (vol.get("csi") or {}).get("driver") == DRIVER:
                inline, csi = True, vol["csi"]
                if csi.get("readOnly") is not True or not (csi.get("volumeAttributes") or {}).get("source"):
                    fail(w, "inline volume must be readOnly: true with volumeAttributes.source")
                secret_ref(w, o["metadata"].get("namespace"), (csi.get("nodePublishSecretRef") or {}).get("name"))
    if not used_pvc or not inline:
        fail(where, f"the examples need a pod using a PVC and a pod using an inline {DRIVER} volume")


# --- docs ------------------------------------------------------------------------------

# Values documented as a whole (their keys are the Kubernetes API's, not the chart's).
WHOLE = {"resources", "nodeSelector", "affinity", "podAnnotations", "annotations", "labels", "updateStrategy"}


def value_paths(v, prefix=""):
    for k, x in v.items():
        if isinstance(x, dict) and x and k not in WHOLE:
            yield from value_paths(x, f"{prefix}{k}.")
        else:
            yield prefix + k


def check_values_documented(root, defaults):
    """Every value of values.yaml has a row in deploy/README.md's "Chart values" table; rows
    may abbreviate siblings: `a.b.c` / `.d` documents a.b.c and a.b.d."""
    text = open(os.path.join(root, "deploy", "README.md"), encoding="utf-8").read()
    table = text.split("## Chart values", 1)[-1].split("\n## ", 1)[0]
    documented = set()
    for row in table.splitlines():
        if not row.startswith("| `"):
            continue
        first = None
        for name in re.findall(r"`([^`]+)`", row.split("|")[1]):
            if name.startswith(".") and first:
                documented.add(first.rsplit(".", 1)[0] + name)
            else:
                first = name
                documented.add(name)
    for path in value_paths(defaults):
        if path not in documented:
            fail("deploy/README.md", f"value {path} is not in the \"Chart values\" table")


# --- main ------------------------------------------------------------------------------

def helm_template(helm, chart, values_file=None, sets=()):
    args = [helm, "template", "epochfs", chart, "--namespace", NAMESPACE]
    if values_file:
        args += ["-f", values_file]
    for s in sets:
        args += ["--set", s]
    return subprocess.run(args, capture_output=True, text=True)


def main():
    render_dir, values_file, root = sys.argv[1:4]
    helm = os.environ.get("HELM") or sys.exit("check.py: set HELM to the helm binary")
    chart = os.path.join(root, "deploy", "helm", "epochfs")
    with open(os.path.join(chart, "values.yaml")) as f:
        defaults = yaml.safe_load(f)
    with open(values_file) as f:
        test_values = yaml.safe_load(f)
    surge = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    if not defaults["mounter"]["enabled"] or defaults["mounter"]["updateStrategy"] != surge:
        fail("values.yaml", "the mount processes must default to the mounter DaemonSet (mounter.enabled), "
                            f"rolled with a surge (mounter.updateStrategy {surge}): the new pod takes the mounts "
                            "over before the old one goes")

    check_dashboard(root)  # before the renderings: they must embed it

    r = lambda n: parse(n, open(os.path.join(render_dir, n)).read())
    base, examples, prod = r("kustomize-base.yaml"), r("kustomize-examples.yaml"), r("kustomize-production.yaml")
    jobctl = r("kustomize-job-controller.yaml")
    renders, n = {}, len(base) + len(examples) + len(prod) + len(jobctl)
    with tempfile.TemporaryDirectory() as tmp:
        for name, over in VARIANTS.items():
            over = test_values if over == "@test" else over
            vf = os.path.join(tmp, "values.yaml")
            with open(vf, "w") as f:
                json.dump(over, f)
            res = helm_template(helm, chart, vf)
            if res.returncode != 0:
                fail(name, f"helm template failed:\n{res.stderr}")
                continue
            renders[name] = parse(name, res.stdout)
            n += len(renders[name])
            check_install(name, renders[name], merge(defaults, over))
    for sets, msg in REFUSALS:
        res = helm_template(helm, chart, sets=sets)
        if res.returncode == 0:
            fail("refusals", f"the chart renders --set {' '.join(sets)}; it must refuse it")
        elif msg not in res.stderr:
            fail("refusals", f"--set {' '.join(sets)} is refused, but the message lacks {msg!r}:\n{res.stderr}")

    # The kustomize trees are the chart's defaults (the base) and the chart with
    # dynamic provisioning (the production overlay), object for object.
    one("kustomize base", base, "Namespace", NAMESPACE)
    if "helm default values" in renders:
        compare("kustomize base vs helm default values", base, renders["helm default values"])
    if "helm controller.enabled=true" in renders:
        compare("kustomize production overlay vs helm controller.enabled=true", prod,
                renders["helm controller.enabled=true"])
    if "helm jobController.enabled=true" in renders:
        compare("kustomize base + job-controller vs helm jobController.enabled=true", base + jobctl,
                renders["helm jobController.enabled=true"])
    # mounter.enabled=false: the defaults minus the mounter DaemonSet and
    # --mounter-endpoint, with the mount processes' resources on csi-driver
    # and the node plugin updated OnDelete.
    if "helm default values" in renders and "helm mounter.enabled=false" in renders:
        expect = [o for o in copy.deepcopy(renders["helm default values"])
                  if (o["kind"], o["metadata"]["name"]) != ("DaemonSet", "epochfs-mounter")]
        for o in find(expect, "DaemonSet", "epochfs-node"):
            o["spec"]["updateStrategy"] = {"type": "OnDelete"}
            drv = by_name(o["spec"]["template"]["spec"])["csi-driver"]
            drv["args"] = [a for a in drv["args"] if not a.startswith("--mounter-endpoint=")]
            drv["resources"] = defaults["mounter"]["resources"]
        compare("helm default values without the mounter vs helm mounter.enabled=false",
                expect, renders["helm mounter.enabled=false"])
    sc = one("helm test values", renders.get("helm test values", []), "StorageClass", test_values["storageClass"]["name"])
    if sc:
        tv = merge(defaults, test_values)["storageClass"]
        want = {k: x for k, x in tv["parameters"].items() if x}
        want.update({"csi.storage.k8s.io/node-stage-secret-name": tv["nodeStageSecret"]["name"],
                     "csi.storage.k8s.io/node-stage-secret-namespace": tv["nodeStageSecret"]["namespace"]})
        if sc.get("parameters") != want or sc.get("provisioner") != DRIVER \
                or sc.get("reclaimPolicy") != tv["reclaimPolicy"] or sc.get("volumeBindingMode") != tv["volumeBindingMode"] \
                or (sc["metadata"].get("annotations") or {}).get("storageclass.kubernetes.io/is-default-class") != "true":
            fail("helm test values", f"StorageClass is not as storageClass.* says: {sc}")

    check_examples("kustomize examples", examples)
    scan_sources(root)
    check_values_documented(root, defaults)

    if failures:
        print(f"deploy-check: {len(failures)} problem(s):", file=sys.stderr)
        for f in failures:
            print(f"  FAIL {f}", file=sys.stderr)
        return 1
    print(f"deploy-check: checks passed ({n} objects in {4 + len(renders)} renderings, "
          f"{len(REFUSALS)} bad value sets refused)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
