#!/usr/bin/env bash
# Writes docs/configuration.md from the --help of every binary a user runs
# (fedlgc-coordinator, -edge, -sim, -load, -export, -codec and its commands, -report), so
# the reference is the binaries' own. With --check, compares instead and fails when the
# file is out of date (a ctest runs this).
#   scripts/gen-config-doc.sh [--check] [BIN_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
if [ "${1:-}" = --check ]; then check=1; shift; fi
bin=${1:-build/bin}
src=$(pwd)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
help() {  # a binary's --help, with this machine's paths made generic
  COLUMNS=100 "$bin/$@" --help | sed -e "s|$(cd "$bin" && pwd)|<build>/bin|g" -e "s|$src|<source>|g"
}
{
  cat <<'MD'
# Configuration reference

Generated from the binaries' `--help` by `scripts/gen-config-doc.sh` (a test fails when this
file is out of date). Every flag can also be given in a TOML file passed with `--config FILE`,
as `key=value` lines whose keys are the long flags without their dashes; a flag on the
command line overrides the file, and an unknown key is an error. For example:

```toml
# job.toml
mode='lsgd'
rounds=40
codec='qsgd(bits=4)'
lsgd-groups='client-0,client-1;client-2,client-3'
insecure=true
```

```sh
fedlgc-coordinator --config job.toml --rounds 50   # 50 rounds: the command line wins
fedlgc-coordinator --config job.toml --rounds 50 --print-config > effective.toml
```

`--print-config` prints the configuration a command line gives (its flags over the
`--config` file over the defaults) as such a file, every key with its value, and exits:
`--config effective.toml` gives the same job.

`fedlgc-sim` takes the coordinator's job and mode flags itself and writes them, with the
service settings it picks (addresses, state folders, certificates), into the config files of
the coordinator and of each client it starts (`coordinator.toml`, `client-<i>.toml` in its run
folder). Each component checks its options as a whole before it starts (`Validate()`), and a
refusal names the flag.

## Checking a configuration before a run

`--check` (`fedlgc-coordinator`, `fedlgc-edge`, `fedlgc-sim`, `fedlgc-load`,
`fedlgc-export`) checks what the command line would use and exits, without writing a file,
listening on a port or dialling anyone: the options as a whole, the model (built or loaded)
and the data (read, split into the client's shard, fitted to the model), the checkpoint it
would resume from, the round protocol and its codecs made for the model, the folders and
files it would write (state, `--export`, `--tensorboard`, reports), the certificates (each
file parsed, the key matched to its certificate, the certificate verified against the CA
and its expiry), and the addresses (a listen port bound and released, a coordinator's name
resolved). Each item gets a line, every item is checked even after one fails, an item that
needs a failed one says so, and the exit code is 0 only when nothing failed. `fedlgc-sim`
and `fedlgc-load` check their own items and then their coordinator's job; `fedlgc-edge
--client-ids` checks the first of its clients. For example, with the CA's key given as the
server's and a test file not there yet:

```
$ fedlgc-coordinator --check --tls-ca certs/ca.pem --tls-cert certs/server.pem \
    --tls-key certs/ca.key --test-data npz:data/test.npz --export out/model.pt
ok    job                the mode's options agree
ok    options            fedavg, 20 rounds, up zstd(qsgd(bits=4,norm=linf)), down zstd(qsgd(bits=4,norm=linf))
ok    state folder       state/coordinator: will be made (in /home/me/job, which can be written)
ok    export             out/model.pt: will be written (its folder can be written)
-     tensorboard        none (no --tensorboard)
FAIL  certificates       key certs/ca.key does not belong to the certificate certs/server.pem
ok    listen             127.0.0.1:50051: free
ok    metrics listen     127.0.0.1:0: any free port
ok    model              cnn: 215,370 values (average buffers, loss auto)
FAIL  test data          data/test.npz: cannot open: No such file or directory
-     checkpoint         needs the model and test data
-     round protocol     needs the model and test data
-     downlink           needs the model and test data
fedlgc-coordinator --check: 7 usable, 2 failed, 4 not checked
```

Every binary logs to stderr, one line per message: the level's letter (`D`, `I`, `W`, `E`),
the UTC time to the millisecond, who speaks (`coordinator`, a client's id, `aggregator`)
and the message, e.g. `W 2026-11-28T19:30:01.123Z client-3: round 7 skipped: ...`.
`--log-level` (debug, info, warning, error; default info) drops the lines below it.

## fedlgc-coordinator

```
MD
  help fedlgc-coordinator
  printf '```\n\n## fedlgc-edge\n\n```\n'
  help fedlgc-edge
  printf '```\n\n## fedlgc-sim\n\n```\n'
  help fedlgc-sim
  printf '```\n\n## fedlgc-load\n\n```\n'
  help fedlgc-load
  printf '```\n\n## fedlgc-export\n\n```\n'
  help fedlgc-export
  printf '```\n\n## fedlgc-codec\n\n```\n'
  help fedlgc-codec
  for cmd in encode decode info; do
    printf '```\n\n### fedlgc-codec %s\n\n```\n' "$cmd"
    help fedlgc-codec "$cmd"
  done
  printf '```\n\n## fedlgc-report\n\n```\n'
  help fedlgc-report
  printf '```\n'
} >"$out"
if [ "$check" = 1 ]; then
  if ! diff -u docs/configuration.md "$out"; then
    echo "docs/configuration.md is out of date: run scripts/gen-config-doc.sh" >&2
    exit 1
  fi
  echo "docs/configuration.md is up to date"
else
  cp "$out" docs/configuration.md
  echo "wrote docs/configuration.md"
fi
