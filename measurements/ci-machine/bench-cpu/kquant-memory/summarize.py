import re,glob,sys
names={'39':'MXFP4','8':'Q8_0','10':'Q2_K','11':'Q3_K','12':'Q4_K','13':'Q5_K','14':'Q6_K'}
isan={'1':'avx2','2':'avx512'}
def probe(f):
    for l in open(f):
        m=re.match(r'bench_cpu: host read probe ([\d.]+) GB/s with (\d+) threads, ([\d.]+) GB/s with one',l)
        if m: return float(m[1]),float(m[3])
print("## BM_CpuRowsInt8 (one thread, one token; GB/s of weight bytes; runs 1 and 2)\n")
print("probes (one thread, GB/s):", ', '.join(f"{f.split('_')[2]} {f.split('_')[3][:-4]}: {probe(f)[1]:.1f}" for f in sorted(glob.glob('rows_*.txt'))))
print("\n| type | kernel | W | base a9fe3f7 | new 762f928 |\n|---|---|---|--:|--:|")
res={}
for f in sorted(glob.glob('rows_*.txt')):
    v=f.split('_')[2]
    for l in open(f):
        m=re.match(r'BM_CpuRowsInt8/type:(\d+)/isa:(\d)/cached:(\d).*GB/s=([\d.]+)',l)
        if m: res.setdefault((m[1],m[2],m[3]),{}).setdefault(v,[]).append(float(m[4]))
order=['39','8','10','11','12','13','14']
for k in sorted(res,key=lambda k:(order.index(k[0]),k[1],-int(k[2]))):
    r=res[k]
    print(f"| {names[k[0]]} | {isan[k[1]]} | {'cached' if k[2]=='1' else 'memory'} | {' / '.join('%.1f'%x for x in r['base'])} | {' / '.join('%.1f'%x for x in r['new'])} |")
for th in ['1','2']:
    print(f"\n## BM_CpuExpertInt8, {th} thread(s), M = 1 (GB/s, of_probe; runs 1 and 2)\n")
    fs=sorted(glob.glob(f'expert_threads{th}_*.txt'))
    print("probes (pool, GB/s):", ', '.join(f"{f.split('_')[2]} {f.split('_')[3][:-4]}: {probe(f)[0]:.1f}" for f in fs))
    res={}
    for f in fs:
        v=f.split('_')[2]
        for l in open(f):
            m=re.match(r'BM_CpuExpertInt8/type:(\d+)/E:5120/F:2304/M:1/isa:(\d).*GB/s=([\d.]+).*of_probe=([\d.]+)',l)
            if m: res.setdefault((m[1],m[2]),{}).setdefault(v,[]).append((float(m[3]),float(m[4])))
    print("\n| type | kernel | base a9fe3f7 | new 762f928 |\n|---|---|--:|--:|")
    for k in sorted(res,key=lambda k:(order.index(k[0]),k[1])):
        r=res[k]
        fmt=lambda xs:' / '.join(f"{g:.1f} ({p:.2f})" for g,p in xs)
        print(f"| {names[k[0]]} | {isan[k[1]]} | {fmt(r['base'])} | {fmt(r['new'])} |")
