#!/usr/bin/env python3
"""Trial segment-placement rules for the CUDA driver, on a GPU history.

A classic replay of a GPU history gives the GPU's peaks only with the
driver's own segment addresses (the engine takes them as hints); the
predictor places segments top down or first fit. This rewrites a history's
segment addresses by a candidate rule (every block moved with its segment)
so that `cachealloc compare OUT --conf ""` shows whether the rule gives the
GPU's figures. Session 32 (RegNet-Y-1.6GF classic b64, H100): the GPU's
addresses 2,926 MiB; top-down, 32 MiB chunks (2-512 MiB) and an initial
bottom-up region (256-512 MiB) all 2,834 MiB: none of them is the driver's
rule.

    python3 benchmarks/predict/segment_order_trial.py HISTORY.pickle.gz OUT.pickle RULE [CHUNK_MIB]

RULE: identity (the GPU's addresses: checks the plumbing), topdown, chunked
(segments in CHUNK_MIB-aligned chunks taken top down, smaller segments
first fit into the chunks' free tails, lowest first), regionN (the first N
MiB filled bottom up first fit, then chunked below it). The history is read
with the plain-data unpickler.
"""
import bisect
import gzip
import pickle
import sys
sys.path.insert(0, __import__('os').path.join(__import__('os').path.dirname(__file__), '..', '..', 'bindings', 'python'))
from cachealloc import plain_pickle
src, dst, rule = sys.argv[1], sys.argv[2], sys.argv[3]
snap = plain_pickle.load(gzip.open(src,'rb'))
tr = snap['device_traces'][0]
MiB=1<<20; CH=int(sys.argv[4])*MiB if len(sys.argv)>4 else 32*MiB
TOP=1<<45
segs=[]   # sorted list of (start,end)
floor=TOP
def first_fit_above(lo, size):
    # lowest gap >= lo within [lo, TOP)
    cur=lo
    for s,e in segs:
        if e<=cur: continue
        if s-cur>=size: return cur
        cur=max(cur,e)
    return cur if TOP-cur>=size else None
remap={}  # old seg start -> (new start, size)
out=[]
def find_seg(addr):
    for o,(n,sz,osz) in remap.items():
        if o<=addr<o+osz: return o
    return None
seg_of={}
for e in tr:
    a=e['action']
    if a=='segment_alloc':
        size=e['size']
        if rule=='chunked':
            at=first_fit_above(floor, size) if floor<TOP else None
            if at is None:
                ch=(size+CH-1)//CH*CH
                floor-=ch; at=floor
        elif rule.startswith('region'):
            R=int(rule[6:])*MiB
            base1=TOP  # region 1: [TOP, TOP+R) ascending first fit; chunks below TOP
            cur=base1; at=None
            for s_,e_ in segs:
                if e_<=cur or s_>=base1+R: continue
                if s_-cur>=size: at=cur; break
                cur=max(cur,e_)
            if at is None and base1+R-cur>=size: at=cur
            if at is None:
                at=first_fit_above(floor, size) if floor<TOP else None
                if at is not None and at+size>TOP: at=None
                if at is None:
                    ch=(size+CH-1)//CH*CH
                    floor-=ch; at=floor
        elif rule=='identity':
            at=e['addr']
        elif rule=='topdown':
            at=floor-size; floor=at
        else:
            raise SystemExit(f"unknown rule {rule!r} (identity, topdown, chunked, regionN)")
        remap[e['addr']]=(at,size,size)
        bisect.insort(segs,(at,at+size))
        e=dict(e,addr=at)
    elif a=='segment_free':
        n,sz,_=remap.pop(e['addr'])
        segs.remove((n,n+sz)); e=dict(e,addr=n)
    elif a in ('alloc','free_requested','free_completed'):
        o=seg_of.get(e['addr'])
        if o is None:
            o=find_seg(e['addr']); seg_of[e['addr']]=o
        if a=='free_completed': seg_of.pop(e['addr'],None)
        n=remap[o][0]; e=dict(e,addr=n+(e['addr']-o))
    out.append(e)
snap2={'segments':[], 'device_traces':[out]}
pickle.dump(snap2, open(dst,'wb'))
