"""The README example: integrate the paper's chain, print its stages, save it."""

import gradflow as gf


chain = gf.chains.sticky(d=6, top_mass=0.5, rho=0.5, delta=0.05)
traj = gf.integrate(chain, init_scale=1e-3, width=8, t1=20_000)
print(traj)
print(
    f"loss: log d = {traj.loss[0]:.6f} -> {traj.loss[-1]:.6f} "
    f"(conditional entropy {float(chain.conditional_entropy):.6f})"
)
for s in traj.stages:
    print(f"{s.name:>14} cycle {s.cycle}: t = {s.t_start:8.1f} .. {s.t_end:8.1f}")
print("stats:", traj.stats)
traj.save("quickstart.npz")
