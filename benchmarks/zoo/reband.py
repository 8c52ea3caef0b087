"""Each row's band made again with the current class bands
(answer/data/tuning_errors.json), its own unmodelled items and its
placement spread, and the GPU figures inside it counted: for prediction
files made before the band data changed (their stored bands are older).

    python3 benchmarks/zoo/reband.py TRUTH.json PRED.json [BAND_DATA.json]

PRED must carry band_items and placement_alt (benchmarks/zoo/predict.py
since 2026-12-06); rows without them get no items and no spread."""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "bindings", "python"))
from cachealloc.predict.answer import band
d=band.load(sys.argv[3] if len(sys.argv)>3 else None)
truth=json.load(open(sys.argv[1])); pred=json.load(open(sys.argv[2]))
n=inside=0; out=[]
for s,R in truth['setups'].items():
    P=pred['setups'].get(s,{}).get('fits',{})
    cls=R['class']; cb=band.class_band(d,cls)
    for c in ('classic','expandable'):
        for b,t in R['peaks'].get(c,{}).items():
            p=P.get(b)
            if not p or 'configs' not in p or not t.get('ok'): continue
            pc=p['configs'][c]; items=p.get('band_items') or []
            sp=band.placement_spread(pc)
            ok=True
            for q,tq,pct,iq in (('peak_allocated','max_memory_allocated',cb['allocated_pct'],'allocated'),('peak_reserved','max_memory_reserved',cb['reserved_pct'],'reserved')):
                lo,hi=band.spread(band.widen(pc[q],pct,items,iq,cb[f'{iq}_noise']),sp[q])
                v=pc[q]; g=t[tq]
                if not (v-lo<=g and (hi is None or g<=v+hi)): ok=False; out.append((s,c,b,q,round((v-g)/g*100,2)))
            n+=1; inside+=ok
print(f"{inside} of {n} rows inside the band"); print(out)
