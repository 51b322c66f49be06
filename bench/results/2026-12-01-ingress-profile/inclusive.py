import sys, collections
tot=0; incl=collections.Counter()
for line in open(sys.argv[1]):
    stack, _, n = line.rstrip().rpartition(" ")
    n=int(n); frames=stack.split(";"); tot+=n
    seen=set()
    for f in frames:
        if f in seen: continue
        seen.add(f); incl[f]+=n
print("total", tot)
pat=sys.argv[2] if len(sys.argv)>2 else ""
for k,v in incl.most_common(400):
    if pat in k: print(f"{v:6d} {100*v/tot:5.1f}% {k[:160]}")
