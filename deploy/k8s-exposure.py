"""The services' exposure in one rendered overlay, as a platform team would check it.

`make k8s-lint` runs it on every overlay it renders (deploy/k8s-lint.sh). It holds:

- the gateway serves /metrics and /admin on an ops port (SECKILL_GATEWAY__OPS_LISTEN in
  its settings ConfigMap), a container port named `ops`, not its public port;
- the public Service exposes the public port only, and no Service exposing the ops port
  is the backend of an Ingress;
- every NetworkPolicy rule that admits the ops port names its sources, and only as
  namespaces: no rule opens it to the world or to any pod — and the same for the consumer's
  and the reconcile daemon's ops ports (their only port: /metrics, and reconcile's report,
  which names order tokens);
- the gateway's ServiceMonitor, where there is one, scrapes the ops port.

Usage: k8s-exposure.py RENDERED.yaml LABEL; exits 1 and names each breach.
"""

import sys

import yaml

GATEWAY = "gateway-svc"
# Services whose only port is their ops port, named `ops`.
OPS_ONLY = ("order-consumer-svc", "reconcile-svc")


def by_kind(objects, kind):
    return [o for o in objects if o.get("kind") == kind]


def pods_selected(selector, app):
    labels = (selector or {}).get("matchLabels") or {}
    return labels.get("app.kubernetes.io/name") == app


def gateway_pods_selected(selector):
    return pods_selected(selector, GATEWAY)


def container_ports(objects, app):
    """The named ports of `app`'s Deployment's first container, or None without one."""
    for deployment in by_kind(objects, "Deployment"):
        if deployment["metadata"]["name"] == app:
            container = deployment["spec"]["template"]["spec"]["containers"][0]
            return {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    return None


def ops_sources(objects, app, ops):
    """Breaches of: every NetworkPolicy rule admitting `app`'s ops port names namespaces."""
    problems = []
    for policy in by_kind(objects, "NetworkPolicy"):
        selector = policy["spec"].get("podSelector") or {}
        if selector and not pods_selected(selector, app):
            continue
        for rule in policy["spec"].get("ingress", []):
            rule_ports = {p.get("port") for p in rule.get("ports", [])}
            admits_ops = not rule_ports or ops in rule_ports or "ops" in rule_ports
            if not admits_ops:
                continue
            sources = rule.get("from") or []
            name = policy["metadata"]["name"]
            if not sources:
                problems.append(f"NetworkPolicy {name} admits {app}'s ops port from anywhere")
            for source in sources:
                if set(source) != {"namespaceSelector"} or not source["namespaceSelector"]:
                    problems.append(
                        f"NetworkPolicy {name} admits {app}'s ops port from {source}: only "
                        "named namespaces may reach it"
                    )
    return problems


def check(objects):
    problems = []
    for app in OPS_ONLY:
        app_ports = container_ports(objects, app)
        if app_ports is None or "ops" not in app_ports:
            problems.append(f"{app} must have a Deployment whose container port is `ops`")
        else:
            problems.extend(ops_sources(objects, app, app_ports["ops"]))
    ports = container_ports(objects, GATEWAY)
    if ports is None:
        return problems + [f"expected a Deployment {GATEWAY}"]
    if "http" not in ports or "ops" not in ports:
        return problems + [f"{GATEWAY}'s container must name its ports `http` and `ops`: {ports}"]
    public, ops = ports["http"], ports["ops"]
    if public == ops:
        problems.append(f"the public and ops ports are the same port ({public})")

    settings = {}
    for config_map in by_kind(objects, "ConfigMap"):
        if config_map["metadata"]["name"].startswith("seckill-settings"):
            settings.update(config_map.get("data") or {})
    ops_listen = settings.get("SECKILL_GATEWAY__OPS_LISTEN", "")
    if not ops_listen.endswith(f":{ops}"):
        problems.append(
            f"SECKILL_GATEWAY__OPS_LISTEN is {ops_listen!r}: /metrics and /admin must be "
            f"served on the container's ops port {ops}, not on {public}"
        )

    def targets(service_port):
        target = service_port.get("targetPort", service_port["port"])
        return ports.get(target, target) if isinstance(target, str) else target

    ops_services = set()
    for service in by_kind(objects, "Service"):
        if (service["spec"].get("selector") or {}).get(
            "app.kubernetes.io/name"
        ) != GATEWAY:
            continue
        name = service["metadata"]["name"]
        exposed = {targets(p) for p in service["spec"].get("ports", [])}
        if ops in exposed:
            ops_services.add(name)
            if exposed != {ops}:
                problems.append(f"Service {name} mixes the ops port with {exposed - {ops}}")
            if service["spec"].get("type", "ClusterIP") != "ClusterIP":
                problems.append(f"Service {name} exposes the ops port outside the cluster")
        elif exposed != {public}:
            problems.append(f"Service {name} exposes {exposed}, not only the public port")

    for ingress in by_kind(objects, "Ingress"):
        for rule in ingress["spec"].get("rules", []):
            for path in (rule.get("http") or {}).get("paths", []):
                backend = path["backend"]["service"]["name"]
                if backend in ops_services:
                    problems.append(
                        f"Ingress {ingress['metadata']['name']} routes {path.get('path')} "
                        f"to the ops Service {backend}"
                    )

    problems.extend(ops_sources(objects, GATEWAY, ops))

    for monitor in by_kind(objects, "ServiceMonitor"):
        if not gateway_pods_selected(monitor["spec"].get("selector")):
            continue
        for endpoint in monitor["spec"].get("endpoints", []):
            if endpoint.get("port") != "ops":
                problems.append(
                    f"ServiceMonitor {monitor['metadata']['name']} scrapes port "
                    f"{endpoint.get('port')!r}, not `ops`"
                )
    return problems


def main():
    rendered, label = sys.argv[1], sys.argv[2]
    with open(rendered, encoding="utf-8") as file:
        objects = [o for o in yaml.safe_load_all(file) if o]
    problems = check(objects)
    for problem in problems:
        print(f"k8s-lint: FAIL exposure {label}: {problem}", file=sys.stderr)
    if problems:
        sys.exit(1)
    print(
        f"k8s-lint: exposure {label}: /metrics and /admin on the ops ports only, "
        "each open to named namespaces alone"
    )


if __name__ == "__main__":
    main()
