#!/bin/sh
# Entry point of the replicas compose file: `init` (once) or `serve`.
# init: makes the shared server key and prints an admin API token (opening the database, which
# applies its migrations). serve: copies the shared baton.toml and server key into this replica's data
# dir, then serves on every interface (authentication is on: users exist).
set -eu
data=/data
mkdir -p "$data"
cp /etc/baton/baton.toml "$data/baton.toml"
case "${1:-serve}" in
init)
    if [ ! -s /shared/server.key ]; then
        # The key's format: 64 hex digits (32 random bytes).
        umask 077
        od -An -tx1 -N32 /dev/urandom | tr -d ' \n' > /shared/server.key
    fi
    if [ ! -e /shared/admin-token-made ]; then
        echo "admin API token (shown once; sign in to the board with it):"
        baton --data-dir "$data" token create --user admin --role admin
        touch /shared/admin-token-made
    fi
    ;;
serve)
    cp /shared/server.key "$data/server.key"
    chmod 600 "$data/server.key"
    exec baton --data-dir "$data" serve --bind 0.0.0.0:8741
    ;;
*)
    exec baton --data-dir "$data" "$@"
    ;;
esac
