"""Machine learning: replicating a benchmark result (runs are samples, compute is equipment)."""

from replicalab.scenario_records import Domain
from replicalab.scenario_records import TechniqueSpec as T

DOMAIN = Domain(
    name="ml_benchmark",
    techniques=(
        T("full_finetuning", (("a100_node", "h100_node"), ("nvme_scratch", "network_storage")),
          (("gpu_hour_credits",),), 3.0, 4, "The model was fully fine-tuned on the benchmark's training split."),
        T("lora_finetuning", (("a100_node", "l40s_node", "h100_node"),),
          (("gpu_hour_credits",), ("peft_adapter_config",)), 1.5, 2,
          "The model was fine-tuned with low-rank adapters on the training split."),
        T("linear_probe", (("l40s_node", "t4_node"),), (("feature_cache",),), 0.5, 1,
          "A linear probe was trained on frozen features."),
        T("few_shot_prompting", (("inference_server", "t4_node"),), (("api_quota",), ("prompt_templates",)),
          0.4, 1, "The model was evaluated with few-shot prompting.", "external_api"),
        T("knowledge_distillation", (("h100_node", "a100_node"), ("nvme_scratch",)),
          (("gpu_hour_credits",), ("teacher_logits",)), 3.5, 5,
          "A student was distilled from the teacher's logits.", "restricted_weights"),
        T("human_preference_eval", (("annotation_platform",),), (("annotator_hours",),), 2.0, 3,
          "Outputs were rated by human annotators.", "human_subjects"),
    ),
    controls=("random_baseline", "majority_class_baseline", "seed_variance_runs", "original_checkpoint_eval",
              "data_leakage_check", "ablation_no_pretraining"),
    subjects=("sst2", "mnli", "squad_v2", "cifar100", "imagenet_subset", "mmlu", "gsm8k", "librispeech_clean"),
    treatments=("bert_base", "roberta_large", "vit_b16", "resnet50", "llama_7b", "t5_base", "gpt2_medium",
                "whisper_small"),
    equipment_fee_range=(40.0, 400.0),
    reagent_cost_range=(2.0, 30.0),
    critical_cost_range=(0.5, 5.0),
    control_cost_range=(100.0, 600.0),
    sample_size_range=(6, 24),
    sample_unit="runs",
    hazards={"external_api": "evaluation data may not leave the cluster",
             "restricted_weights": "teacher weights under a restrictive licence may not be used",
             "human_subjects": "no human annotation without ethics approval"},
    title_templates=("{treatment} reaches state of the art on {subject}",
                     "Revisiting {treatment} on {subject}",
                     "{subject} results for {treatment} with {technique}"),
    hypothesis_template="{treatment} trained with {technique} beats the published baselines on {subject}.",
    finding_template="{treatment} improved the {subject} score over baselines across {n} {unit}.",
    goal_template="Replicate the {subject} result of {treatment} within the lab's compute and time.",
)
