import sys, json, subprocess
C = "/work/main/build/tools/cachealloc"
trace, conf, mn, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def ooms(limit):
    out = subprocess.run([C, "compare", trace, "--conf", conf, "--memory-limit", str(limit), "--json", "--quiet"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)["configs"][0]["ooms"]
assert ooms(mn) == 0 and ooms(mn - 1) > 0
U = 2 << 20
found = []
for k in range(1, steps + 1):
    for lim in (mn - k * U, mn - k * U + U // 2, mn - k * (U // 3)):
        if lim > 0 and ooms(lim) == 0: found.append(lim)
print(trace.split('/')[-1], repr(conf), "min", mn, "clean limits below min:", found[:5], len(found))
