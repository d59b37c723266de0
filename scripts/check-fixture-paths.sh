#!/usr/bin/env bash
# Fails when a file under tests/ or fuzz/ names a path in the repository's models/ folder: the tests read only the
# fixtures of tests/data (each with its provenance in tests/data/README.md) and the downloaded SmolLM2
# (CONTRIBUTING.md). tests/data itself (the fixtures) and fuzz/corpus/ (generated seeds) are not read. A line passes
# once the allowed spellings below are taken out of it and no "models/" is left; a failure prints FILE:LINE: TEXT of
# every offending line. Usage: bash scripts/check-fixture-paths.sh [ROOT]   (ROOT: the repository, by default)
set -euo pipefail
ROOT=${1:-"$(dirname "$0")/.."}
cd "$ROOT"
# Perl regular expressions, one a line.
ALLOWED='tests/data/models/
data_dir\(\) \+ "/models/
KVSIEVE_TEST_DATA\) \+ "/models/
\$\{KVSIEVE_TEST_DATA\}/models/
models/SmolLM2-
"/models/" \+ kModelName
"models/m\.gguf
kvzap:model=models/kvzap/m-(linear|mlp)[,/]
\$\{CMAKE_SOURCE_DIR\}/models/kvzap/smollm2-135m-linear,
share/kvsieve/models
/kvsieve/models/'
# What each allows: the fixtures and the build's copy of them (test::data_dir(), KVSIEVE_TEST_DATA); the downloaded
# SmolLM2 (scripts/get-model.sh; test_smollm2.cpp names it by kModelName); the made-up model paths that
# test_leaderboard.cpp writes into made-up config.yaml files (models/m.gguf, models/kvzap/m-{linear,mlp}); and the
# SmolLM2 KVzap surrogate that README's first command runs, read by one test only: README's demo
# (SmolLM2.DemoLearnedQuantizedCacheAnswers in tests/CMakeLists.txt); and an installed package's predictor folder
# (share/kvsieve/models, tests/package_test.sh), and a user's predictor folder under a test's own temporary
# $XDG_DATA_HOME (<home>/kvsieve/models/, the one-command training tests). Every other KVzap surrogate a test reads lives
# in tests/data/models/kvzap/.
dirs=$(for d in tests fuzz; do [ -d "$d" ] && echo "$d"; done || true)
files=$([ -z "$dirs" ] ||
        find $dirs \( -path tests/data -o -path fuzz/corpus \) -prune -o -type f -print | LC_ALL=C sort)
[ -n "$files" ] || { echo "error: check-fixture-paths: no files under $ROOT/tests or $ROOT/fuzz" >&2; exit 2; }
ALLOWED=$ALLOWED perl -ne '
  BEGIN { @allowed = split /\n/, $ENV{ALLOWED}; $bad = 0 }
  my $rest = $_;
  $rest =~ s/$_//g for @allowed;
  if ($rest =~ m{models/}) { chomp; print STDERR "$ARGV:$.: $_\n"; $bad = 1 }
  close ARGV if eof;
  END {
    print STDERR "error: the lines above read files in the repository\x27s models folder; tests read only " .
                 "tests/data fixtures and the downloaded SmolLM2 (move the file into tests/data/models and give " .
                 "its provenance in tests/data/README.md)\n" if $bad;
    exit $bad;
  }' $files
