"""The paper's reported numbers (arXiv 2610.22362; see ../shared/paper), printed beside ours.

Values are OOD success in % unless named otherwise. `None` where the paper reports no number for a row.
"""

from __future__ import annotations

TABLE1 = {  # §4, Table 1: OOD success after 5 rounds, same generation budget
    "sft": 5.3,
    "domain_rand": 7.9,
    "uniform": 8.5,
    "sr_guided": 18.1,
    "critic_no_memory": 19.2,
    "coda": 27.6,
}
TABLE1_LABELS = {
    "sft": "SFT",
    "domain_rand": "Domain randomization",
    "uniform": "Uniform generation",
    "sr_guided": "Success-rate-guided generation",
    "critic_no_memory": "Critic without memory",
    "coda": "CoDA",
}
FIGURE3 = {"coda": (27.6, 42.1)}  # rounds 5 -> 15

TABLE3 = {  # critic sensitivity: four VLM critics; ours: four diagnosers of decreasing quality
    "sim": 27.6,
    "critic_noisy20": 26.1,
    "critic_noisy40": 25.7,
    "critic_phase_only": 24.9,
    "sr_guided": 18.1,
}
TABLE4 = {
    "full": 27.6,
    "t2p_sparse": 22.3,
    "t2p_task_description": 24.6,
    "t2p_no_refinement": 26.1,
    "value_only": 21.4,
}
TABLE4_FEWER_UPDATES_TO_25 = 32.0  # % fewer policy updates to reach 25% OOD with shaping
LEARNING_SPEED_UPDATES_EARLIER = 20_000
CRITIC_AGREEMENT = 97.0  # % of end-of-training chunk choices on which the critics agree

COMPLEMENTARITY = {"critic_no_memory": 19.2, "gen_store_only": 22.8, "train_store_only": 22.1, "coda": 27.6}
FIGURE5_GAP = 10.0  # both program types ≈ 10 points above either alone

TABLE6 = {"within": 100.0, "transferred": 60.3, "scratch": 35.8}  # % of within-family learning progress
TABLE7 = {"sft_b": 3.8, "reuse_b": 21.1, "gain": 18.9}

TABLE8 = {
    "validity_coda": 88.9,
    "validity_uniform": 71.3,
    "precision_coda": 66.7,
    "precision_uniform": 24.6,
    "entropy_coda": 3.18,
    "entropy_uniform": 3.42,
    "rejected_share": 18.2,
    "agreement_before": 73.6,
    "agreement_after": 82.4,
}
TABLE9 = {
    "tokens_per_1000_envs": 7.4e6,
    "gpu_hours_per_1000_envs": 66.0,
    "adaptive_cost_change": -11.0,
    "ood_fixed": 26.1,
    "ood_adaptive": 27.6,
}

TABLE2 = {  # §4, Table 2: LIBERO-Pro success (%) before and after 15 rounds
    "standard": (97.1, 97.4),
    "position": (25.0, 84.0),
    "instruction": (1.0, 76.0),
}
