#!/bin/sh
# Certificates for hami-control: a CA and a serving certificate for the Service's DNS names,
# made with openssl. Then (unless --out-only) the Secret hami-control-tls (tls.crt, tls.key,
# ca.crt) is applied and the CA is put into the MutatingWebhookConfiguration's caBundle.
#
#   deploy/hami-control-certs.sh [--out DIR] [--out-only] [--namespace NS] [--days N]
#
# Run it again before the certificate expires (default 3650 days) and restart hami-control.
set -eu

NAMESPACE=hami-system
SERVICE=hami-control
OUT=""
DAYS=3650
APPLY=1
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT="$2"; shift 2 ;;
    --out-only) APPLY=0; shift ;;
    --namespace) NAMESPACE="$2"; shift 2 ;;
    --days) DAYS="$2"; shift 2 ;;
    *) echo "unknown argument: $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
command -v openssl >/dev/null || { echo "openssl is needed" >&2; exit 1; }
if [ -z "$OUT" ]; then OUT=$(mktemp -d); fi
mkdir -p "$OUT"
cd "$OUT"

DNS="$SERVICE.$NAMESPACE.svc"
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days "$DAYS" \
  -subj "/CN=hami-control-ca" 2>/dev/null
cat > server.ext <<EXT
subjectAltName=DNS:$SERVICE,DNS:$SERVICE.$NAMESPACE,DNS:$DNS,DNS:$DNS.cluster.local
basicConstraints=CA:FALSE
keyUsage=digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
EXT
openssl req -newkey rsa:2048 -nodes -keyout tls.key -out tls.csr -subj "/CN=$DNS" 2>/dev/null
openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out tls.crt \
  -days "$DAYS" -extfile server.ext 2>/dev/null
echo "certificates in $OUT (ca.crt, tls.crt, tls.key) for $DNS"

if [ "$APPLY" = 1 ]; then
  kubectl -n "$NAMESPACE" create secret generic hami-control-tls --from-file=tls.crt \
    --from-file=tls.key --from-file=ca.crt --dry-run=client -o yaml | kubectl apply -f -
  CA_BUNDLE=$(base64 < ca.crt | tr -d '\n')
  kubectl patch mutatingwebhookconfiguration hami-control --type=json \
    -p "[{\"op\":\"add\",\"path\":\"/webhooks/0/clientConfig/caBundle\",\"value\":\"$CA_BUNDLE\"}]"
  echo "Secret $NAMESPACE/hami-control-tls applied; webhook caBundle set"
fi
