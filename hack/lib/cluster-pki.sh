# shellcheck shell=bash
# PKI and kubeconfigs for hack/cluster.sh (sourced, not run). All keys are ECDSA P-256: key
# generation is ~1 ms each (RSA-2048 is ~100 ms), and Kubernetes accepts EC keys everywhere,
# including service-account token signing (ES256).

# pki_ca DIR: self-signed cluster CA (also signs the cluster's signing controller certs).
pki_ca() {
	local d=$1
	openssl ecparam -name prime256v1 -genkey -noout -out "$d/ca.key" 2>/dev/null
	openssl req -x509 -new -key "$d/ca.key" -subj "/CN=srcsi-ca" -days 3650 -out "$d/ca.crt" \
		-addext "basicConstraints=critical,CA:TRUE" \
		-addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
}

# pki_cert DIR NAME SUBJECT EKU [SAN,...]: key + certificate signed by the cluster CA.
#   EKU: clientAuth, serverAuth or "serverAuth,clientAuth".
pki_cert() {
	local d=$1 name=$2 subj=$3 eku=$4 san=${5:-}
	local ext="keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=$eku
basicConstraints=critical,CA:FALSE"
	[[ -n $san ]] && ext+=$'\n'"subjectAltName=$san"
	openssl ecparam -name prime256v1 -genkey -noout -out "$d/$name.key" 2>/dev/null
	openssl req -new -key "$d/$name.key" -subj "$subj" 2>/dev/null |
		openssl x509 -req -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial -days 3650 \
			-extfile <(printf '%s\n' "$ext") -out "$d/$name.crt" 2>/dev/null
}

# pki_all DIR NODE_NAME NODE_IP: everything the cluster needs.
pki_all() {
	local d=$1 node=$2 ip=$3
	mkdir -p "$d"
	pki_ca "$d"
	# The API server is reached as the node IP (from the netns), 127.0.0.1, and the `kubernetes`
	# Service (10.0.0.1 = first IP of --service-cluster-ip-range, and its DNS names).
	pki_cert "$d" apiserver "/CN=kube-apiserver" serverAuth \
		"IP:$ip,IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:$node,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
	# The cluster's registry (hack/cluster.sh start_registry), reached as the node IP.
	pki_cert "$d" registry "/CN=srcsi-registry" serverAuth "IP:$ip"
	# O=system:masters: full access, no RBAC bindings needed.
	pki_cert "$d" admin "/O=system:masters/CN=srcsi-admin" clientAuth
	# Used by the API server for logs/exec/port-forward on the kubelet (kubelet webhook authz
	# then asks the API server, which allows system:masters).
	pki_cert "$d" apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
	# The names the bootstrap RBAC roles are bound to.
	pki_cert "$d" controller-manager "/CN=system:kube-controller-manager" clientAuth
	pki_cert "$d" scheduler "/CN=system:kube-scheduler" clientAuth
	# O=system:nodes + CN=system:node:NAME: required by the Node authorizer and NodeRestriction.
	pki_cert "$d" kubelet "/O=system:nodes/CN=system:node:$node" clientAuth
	# Service-account token signing key pair.
	openssl ecparam -name prime256v1 -genkey -noout -out "$d/sa.key" 2>/dev/null
	openssl ec -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null
	chmod 600 "$d"/*.key
}

# kubeconfig FILE SERVER CA CERT KEY: a kubeconfig with file references (no embedded data).
kubeconfig() {
	cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: srcsi
  cluster:
    server: $2
    certificate-authority: $3
users:
- name: user
  user:
    client-certificate: $4
    client-key: $5
contexts:
- name: srcsi
  context:
    cluster: srcsi
    user: user
    namespace: default
current-context: srcsi
EOF
}
