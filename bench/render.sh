#!/bin/sh
# bench/render.sh RESULTS.jsonl META.txt - Markdown tables from the JSON lines
# of bench/run.sh (kite bench --json, kite bench --probe --json and, when
# present, llama-bench -o jsonl lines tagged "engine": "llama.cpp" and the
# llama2.c lines bench/run.sh writes, tagged "engine": "llama2.c").
# POSIX sh + awk.  Prints to stdout; bench/run.sh splices it into
# BENCHMARKS.md.  Percentages of the roofline for llama.cpp rows use kite's
# bytes-per-token figure of the same file and the same probe.
set -u
res=$1
meta=$2
awk -v metafile="$meta" '
function sval(k,   r) {
    if (match($0, "\"" k "\": *\"[^\"]*\"")) {
        r = substr($0, RSTART, RLENGTH); sub(/^[^:]*: *"/, "", r); sub(/"$/, "", r); return r
    }
    return ""
}
function nval(k,   r) {
    if (match($0, "\"" k "\": *[-+.0-9eE]+")) {
        r = substr($0, RSTART, RLENGTH); sub(/^[^:]*: */, "", r); return r + 0
    }
    return -1
}
# the number of key k as written (a string: lists keep every digit), or -1
function rval(k,   r) {
    if (match($0, "\"" k "\": *[-+.0-9eE]+")) {
        r = substr($0, RSTART, RLENGTH); sub(/^[^:]*: */, "", r); return r
    }
    return -1
}
function bval(k) { return $0 ~ ("\"" k "\": *true") }
function aval(k,   r) {
    if (match($0, "\"" k "\": *\\[[^]]*\\]")) {
        r = substr($0, RSTART, RLENGTH); sub(/^[^[]*\[/, "", r); sub(/\]$/, "", r); gsub(/ /, "", r); return r
    }
    return ""
}
# median / min / max of a comma-separated list into M, MIN, MAX
function stats(list,   v, n, i, j, t) {
    n = split(list, v, ",")
    for (i = 2; i <= n; i++) { t = v[i] + 0; for (j = i - 1; j >= 1 && v[j] + 0 > t; j--) v[j + 1] = v[j]; v[j + 1] = t }
    MIN = v[1] + 0; MAX = v[n] + 0
    M = n % 2 ? v[(n + 1) / 2] + 0 : (v[n / 2] + v[n / 2 + 1]) / 2
    return n
}
function f(x, d) { return x < 0 ? "-" : sprintf("%." d "f", x) }
BEGIN {
    while ((getline l < metafile) > 0) {
        k = l; sub(/ .*/, "", k); v = l; sub(/^[^ ]* ?/, "", v)
        if (k == "note") notes[++nnotes] = v; else meta[k] = v
    }
}
/"probe": true/ {
    cpu = sval("cpu"); isa = sval("isa"); fma = nval("fma_gflops_per_thread")
    nbw = split(aval("read_gb_s"), bw, ",")
    nprobe++ # bench/run.sh probes again before each model: keep the range
    # core availability around the probe with the most threads (kite since Nov 30 late), and probes busy in every try
    nav = split(aval("read_avail_pct"), av, ",")
    if (nav > 0) {
        a = av[nav] + 0; if (!navail++ || a < avmin) avmin = a; if (navail == 1 || a > avmax) avmax = a
        nbz = split(aval("read_busy_tries"), bz, ","); if (bz[nbz] + 0 >= 3) nbusy++ # 3: PROBE_READ_TRIES, every try
    }
    for (t = 1; t <= nbw; t++) {
        if (nprobe == 1 || bw[t] < bwmin[t]) bwmin[t] = bw[t]
        if (nprobe == 1 || bw[t] > bwmax[t]) bwmax[t] = bw[t]
    }
    next
}
/"engine": "llama.cpp"/ {
    m = sval("model_filename"); sub(/.*\//, "", m)
    test = nval("n_prompt") > 0 ? "pp" nval("n_prompt") : "tg" nval("n_gen")
    th = nval("n_threads"); mm = bval("use_mmap") ? "mmap" : "heap"
    key = m SUBSEP test SUBSEP th SUBSEP mm
    # several lines per key when run.sh alternates the engines (-r 1 each): pool the samples
    sep = (key in Ls) ? "," : "" # before the assignment, which creates Ls[key]
    Ls[key] = Ls[key] sep aval("samples_ts")
    lcommit = sval("build_commit"); lbuild = nval("build_number")
    next
}
/"engine": "llama2.c"/ {
    c2test = sval("test")
    C2s = C2s (C2s != "" ? "," : "") rval("tok_s")
    next
}
/"model": / {
    m = sval("model"); test = sval("test"); th = nval("threads")
    if (!(m in seen)) { seen[m] = 1; order[++nm] = m }
    type[m] = sval("type"); bpt[m] = nval("bytes_per_token"); nl[m] = nval("n_layer")
    rs = sval("residency")
    key = m SUBSEP test SUBSEP th SUBSEP rs
    # one line per run of kite bench; run.sh may run a test several times
    # with -r 1 (alternating with llama.cpp): the table then shows medians
    # over the runs, the extremes of their min-max, and summed counts
    sep = (key in Kn) ? "," : ""
    if (!(key in Kn)) {
        row[++nr] = key; Kmin[key] = nval("tok_s_min"); Kmax[key] = nval("tok_s_max")
        Kkern[key] = sval("kernels"); Kres[key] = rs; Kload[key] = nval("load_ms")
    }
    Kn[key]++
    Ktl[key] = Ktl[key] sep rval("tok_s"); Kgbl[key] = Kgbl[key] sep rval("gb_s")
    Krl[key] = Krl[key] sep rval("roofline_pct"); Kgfl[key] = Kgfl[key] sep rval("gflops")
    Kbwl[key] = Kbwl[key] sep rval("read_gb_s"); Kavl[key] = Kavl[key] sep rval("avail_pct")
    if (nval("tok_s_min") < Kmin[key]) Kmin[key] = nval("tok_s_min")
    if (nval("tok_s_max") > Kmax[key]) Kmax[key] = nval("tok_s_max")
    Knoisy[key] += nval("noisy_reps"); Kredo[key] += nval("redone")
    # the main tables test -p/-n of the first runs (the llama2.c turns later decode longer)
    if (test ~ /^pp/) { if (pp == "") pp = test } else if (tg == "") tg = test
    next
}
END {
    for (key in Ls) { stats(Ls[key]); L[key] = M; Lmin[key] = MIN; Lmax[key] = MAX }
    for (key in Kn) {
        stats(Ktl[key]); K[key] = M; stats(Kgbl[key]); Kgb[key] = M; stats(Krl[key]); Kroof[key] = M
        stats(Kgfl[key]); Kgf[key] = M; stats(Kbwl[key]); Kbw[key] = M; stats(Kavl[key]); Kav[key] = M
    }
    printf "Generated by `make bench` (bench/run.sh, then bench/render.sh) on %s, kite commit %s, %s.\n\n", meta["date"], meta["commit"], meta["compiler"]
    printf "- **Machine**: %s, %s online CPUs. Measured by `kite bench --probe` in the same session", cpu, meta["nproc"]
    if (nprobe > 1) printf " (%d probes, one before each model; min-max)", nprobe
    printf ": read bandwidth"
    for (t = 1; t <= nbw; t++)
        if (nprobe > 1 && bwmax[t] > bwmin[t])
            printf "%s %.1f-%.1f GB/s (%d thread%s)", (t > 1 ? "," : ""), bwmin[t], bwmax[t], t, (t > 1 ? "s" : "")
        else
            printf "%s %.1f GB/s (%d thread%s)", (t > 1 ? "," : ""), bw[t], t, (t > 1 ? "s" : "")
    printf "; FP32 FMA %.1f GFLOP/s per thread (%s loop)", fma, isa
    if (navail) printf ". Core availability around the %d-thread read probe%s: %s%%%s", nbw, (navail > 1 ? "s" : ""), (avmin < avmax ? sprintf("%.0f-%.0f", avmin, avmax) : sprintf("%.0f", avmin)), (nbusy ? sprintf(" (%d probe%s busy in all 3 tries: may read low)", nbusy, nbusy > 1 ? "s" : "") : "")
    printf ".\n"
    printf "- **Load average** (1, 5, 15 min) before the run: %s; after: %s.\n", meta["load_before"], meta["load_after"]
    printf "- **Models**: TinyLlama-1.1B shape from `kite synth` (%s layers; random weights, 32000-token vocabulary), and the bundled stories260K. Repetitions: %s (stories260K: 5); median, with min-max.\n", meta["layers"], meta["reps"]
    if (lcommit != "") printf "- **llama.cpp**: build %d, commit %s (%s), run as `llama-bench -t 2 -p %s -n %s -mmp 0` and with its default mmap (`-r %s`), on the same files, in the same session.%s\n", lbuild, (meta["llama_commit"] != "" ? meta["llama_commit"] : lcommit), lcommit, substr(pp, 3), substr(tg, 3), meta["reps"], (meta["paired"] == 1 ? sprintf(" The 2-thread kite runs and `-mmp 0` take turns, one repetition each (`kite bench -r 1`, `llama-bench -r 1`, %s times), so that a drift of the machine hits both alike; the tables give the medians over those runs.", meta["reps"]) : "")
    for (i = 1; i <= nnotes; i++) printf "- Note: %s\n", notes[i]
    printf "\n"

    # side by side, 2 threads
    printf "### TinyLlama-1.1B shape, 2 threads%s\n\n", (lcommit != "" ? ": kite and llama.cpp side by side" : "")
    if (lcommit != "") {
        printf "| type | GB read per token | kite %s | llama.cpp %s (-mmp 0) | llama.cpp %s (mmap) | kite %s | llama.cpp %s (-mmp 0) | llama.cpp %s (mmap) | decode roofline | kite %% of roofline | llama.cpp %% of roofline (-mmp 0) |\n", pp, pp, pp, tg, tg, tg
        printf "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    } else {
        printf "| type | GB read per token | kite %s tok/s | kite %s tok/s | decode roofline | kite %% of roofline |\n", pp, tg
        printf "|---|---:|---:|---:|---:|---:|\n"
    }
    bw2 = bw[nbw >= 2 ? 2 : nbw]
    for (i = 1; i <= nm; i++) {
        m = order[i]
        if (m !~ /tinyllama/) continue
        kp = m SUBSEP pp SUBSEP 2 SUBSEP "heap"; kt = m SUBSEP tg SUBSEP 2 SUBSEP "heap"
        # against the probe kite bench used for this model (the one just before it)
        mbw = (kt in Kbw) && Kbw[kt] > 0 ? Kbw[kt] : bw2
        roof = bpt[m] > 0 ? mbw * 1e9 / bpt[m] : -1
        if (lcommit != "") {
            l0p = m SUBSEP pp SUBSEP 2 SUBSEP "heap"; l1p = m SUBSEP pp SUBSEP 2 SUBSEP "mmap"
            l0t = m SUBSEP tg SUBSEP 2 SUBSEP "heap"; l1t = m SUBSEP tg SUBSEP 2 SUBSEP "mmap"
            lroof = (l0t in L) && roof > 0 ? 100 * L[l0t] / roof : -1
            printf "| %s | %.2f | %s | %s | %s | %s | %s | %s | %s tok/s | %s%% | %s%% |\n", type[m], bpt[m] / 1e9,
                (kp in K) ? f(K[kp], 1) : "-", (l0p in L) ? f(L[l0p], 1) : "-", (l1p in L) ? f(L[l1p], 1) : "-",
                (kt in K) ? f(K[kt], 2) : "-", (l0t in L) ? f(L[l0t], 2) : "-", (l1t in L) ? f(L[l1t], 2) : "-",
                f(roof, 1), (kt in K) ? f(Kroof[kt], 0) : "-", f(lroof, 0)
        } else {
            printf "| %s | %.2f | %s | %s | %s tok/s | %s%% |\n", type[m], bpt[m] / 1e9, (kp in K) ? f(K[kp], 1) : "-",
                (kt in K) ? f(K[kt], 2) : "-", f(roof, 1), (kt in K) ? f(Kroof[kt], 0) : "-"
        }
    }
    printf "\nDecode roofline = read bandwidth (2 threads, the probe run just before each model: kite and llama.cpp run right after it) / bytes read per token. \"GB read per token\" counts every weight byte a decode step reads (all layer matrices and norms, the classifier, one embedding row).\n\n"

    if (C2s != "") {
        # stories260K against llama2.c: the same greedy decode, one thread, in turns
        nc2 = stats(C2s); c2 = M; c2min = MIN; c2max = MAX
        kk = "stories260K.gguf" SUBSEP c2test SUBSEP 1 SUBSEP "heap"
        printf "### stories260K, 1 thread: kite and llama2.c side by side\n\n"
        printf "| test | kite tok/s (min-max) | llama2.c tok/s (min-max) | kite / llama2.c |\n|---|---:|---:|---:|\n"
        printf "| %s | %s | %.0f (%.0f-%.0f) | %s |\n", c2test,
            (kk in K) ? sprintf("%.0f (%.0f-%.0f)", K[kk], Kmin[kk], Kmax[kk]) : "-", c2, c2min, c2max,
            ((kk in K) && c2 > 0) ? sprintf("%.2fx", K[kk] / c2) : "-" # parenthesized: a bare > redirects printf
        printf "\nllama2.c (karpathy/llama2.c %s, `run stories260K.bin -z tok512.bin -t 0 -n %s`: greedy, its own \"achieved tok/s\") and `kite bench -m models/stories260K.gguf -t 1 -p 0 -n %s -r 1` took turns, %d runs each; medians over the runs.\n\n", meta["llama2c_commit"], substr(c2test, 3), substr(c2test, 3), nc2
    }
    # weight residency: the same file and test, heap vs mmap
    nres = 0
    for (i = 1; i <= nr; i++) {
        split(row[i], p, SUBSEP)
        if (p[4] != "mmap") continue
        hk = p[1] SUBSEP p[2] SUBSEP p[3] SUBSEP "heap"
        if (!(hk in K)) continue
        if (!nres++) {
            printf "### Weight residency: heap (2 MiB-aligned anonymous memory, MADV_HUGEPAGE) vs mmap\n\n"
            printf "| model | threads | test | heap tok/s (min-max) | mmap tok/s (min-max) | heap / mmap | load heap | load mmap | availability heap / mmap |\n"
            printf "|---|---:|---|---:|---:|---:|---:|---:|---:|\n"
        }
        printf "| %s | %d | %s | %.2f (%.2f-%.2f) | %.2f (%.2f-%.2f) | %.2fx | %s ms | %s ms | %.0f%% / %.0f%% |\n", p[1], p[3], p[2],
            K[hk], Kmin[hk], Kmax[hk], K[row[i]], Kmin[row[i]], Kmax[row[i]], K[hk] / K[row[i]], f(Kload[hk], 0), f(Kload[row[i]], 0),
            Kav[hk], Kav[row[i]]
    }
    if (nres) printf "\nLoad time includes reading the file (heap) or mapping it (mmap); the page cache was warm in both cases.\n\n"

    printf "### Every kite result\n\n"
    printf "| model | type | layers | threads | test | tok/s (median) | min-max | GB/s | %% of roofline | GFLOP/s | kernels | weights | core availability | marked reps (kept) |\n"
    printf "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---|---|---:|---:|\n"
    for (i = 1; i <= nr; i++) {
        key = row[i]; split(key, p, SUBSEP); m = p[1]
        printf "| %s | %s | %d | %d | %s | %.2f | %.2f-%.2f | %.2f | %.1f%% %s | %.1f | %s | %s | %s | %d (%d) |\n", m, type[m], nl[m], p[3], p[2],
            K[key], Kmin[key], Kmax[key], Kgb[key], Kroof[key], (p[2] ~ /^pp/ ? "FMA" : "bandwidth"), Kgf[key], Kkern[key], Kres[key],
            (Kav[key] > 0 ? sprintf("%.0f%%", Kav[key]) : "-"), Kredo[key], Knoisy[key]
    }
    printf "\n%% of roofline: decode (tg) = GB/s / read bandwidth at that thread count; prefill (pp) = GFLOP/s / (threads x FMA peak). Core availability = median over the repetitions of the FMA check (on the same thread count) run around each one, as a share of the expected rate; repetitions under 70%% are marked and redone (the count in parentheses are marked ones kept because the machine stayed noisy). See docs/bench.md.\n"
}' "$res"
