"""The benchmarks' own metric code, ported line by line (numpy instead of torch), to test unirag against.

Each function keeps the official computation and names; only the data loading around it is
replaced by plain arguments. Sources (read through the public code index; lines counted on the
stored copy at the commit named):

* CIRCO  - miccunifi/CIRCO ``src/evaluation.py`` at commit 6db01504, ``compute_metrics`` (:14-77):
  mAP@k over ``gt_img_ids`` (:48-55), Recall@k on ``target_img_id`` only (:57-59), means (:69-71);
  ranks 5/10/25/50 (``--ranks`` default).
* CIRR, as X^R scores it (the ``official`` profile) - 01yzzyu/xr.github.io ``XR/xr.py`` at commit
  cf44a37 (unchanged at 30f2cd5): the target's 1-based rank in the full ``sorted_names`` list, the
  reference still in it, ``len(names) + 1`` when absent (``_eval_and_log``, :613-620), Recall@k =
  mean(rank <= k) (``calculate_recall``, :244-248); R_subset is the same computation on the list of a
  separate ``--subset`` run (:588-610).
* CIRR, the benchmark's own protocol (the ``default`` profile) - the validation metrics of the
  reference implementation ABaldrati/CLIP4Cir ``src/validate.py`` at commit 90013598,
  ``compute_cirr_val_metrics`` (:135-188; the CIRR test split is scored by the authors' server with
  the same definitions): reference removed from the ranking (:162-166), Recall@1/5/10/50 (:180-183),
  Recall_subset@1/2/3 over the query's ``img_set`` members (:171-174, :184-186).
* FashionIQ - ABaldrati/CLIP4Cir ``src/validate.py`` at commit 90013598, ``compute_fiq_val_metrics``
  (:21-57): Recall@10/50 of the single target (:48-55) (the X^R code's ``calculate_recall`` in
  01yzzyu/xr.github.io ``XR/xr.py`` counts ``rank <= k`` the same way; X^R lines are cited in
  docs/xr-parity.md).
* UniIR  - TIGER-AI-Lab/UniIR ``src/common/mbeir_retriever.py`` at commit 72871c19,
  ``compute_recall_at_k`` (:149-166): 1 when any relevant document is in the top k ("Recall used by
  CLIP and BLIP codebase", :150), called on the raw retrieved ids (:467-480).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np


def circo_compute_metrics(predictions_dict: dict, annotations: dict, ranks: list[int]) -> tuple[dict, dict]:
    """miccunifi/CIRCO src/evaluation.py at commit 6db01504, compute_metrics (:14-77; the semantic-aspect
    part, :42, :61-63 and :73-75, left out).

    ``annotations``: query id -> {"gt_img_ids": [...], "target_img_id": ...} (the val.json entries).
    Returns (map_atk, recall_atk), fractions in [0, 1] as the official function returns them.
    """
    aps_atk = defaultdict(list)
    recalls_atk = defaultdict(list)
    for query_id, predictions in predictions_dict.items():
        target = annotations[int(query_id)]
        gt_img_ids = target["gt_img_ids"]
        target_img_id = target["target_img_id"]

        predictions = np.array(predictions, dtype=int)
        ap_labels = np.isin(predictions, gt_img_ids)
        precisions = np.cumsum(ap_labels, axis=0) * ap_labels  # Consider only positions corresponding to GTs
        precisions = precisions / np.arange(1, ap_labels.shape[0] + 1)  # Compute precision for each position

        for rank in ranks:
            aps_atk[rank].append(float(np.sum(precisions[:rank]) / min(len(gt_img_ids), rank)))

        recall_labels = (predictions == target_img_id)
        for rank in ranks:
            recalls_atk[rank].append(float(np.sum(recall_labels[:rank])))

    map_atk = {rank: float(np.mean(aps_atk[rank])) for rank in ranks}
    recall_atk = {rank: float(np.mean(recalls_atk[rank])) for rank in ranks}
    return map_atk, recall_atk


def xr_target_rank(sorted_names: list[str], target: str) -> int:
    """01yzzyu/xr.github.io XR/xr.py@cf44a37 :616-619 (``_eval_and_log``): the target's 1-based position in the
    ranked names, one past the end when the list does not hold it."""
    return sorted_names.index(target) + 1 if target in sorted_names else len(sorted_names) + 1


def xr_calculate_recall(ranks: list[int], ks: list[int]) -> dict[int, float]:
    """01yzzyu/xr.github.io XR/xr.py@cf44a37 :244-248 (``calculate_recall``): per k, the mean of rank <= k
    over the queries (a fraction; the official log prints it x100, :623)."""
    return {k: float(np.mean([1 if r <= k else 0 for r in ranks])) for k in ks}


def cirr_val_metrics(sorted_index_names: np.ndarray, reference_names: list[str], target_names: list[str],
                     group_members: list[list[str]]) -> tuple[float, ...]:
    """ABaldrati/CLIP4Cir src/validate.py at commit 90013598, compute_cirr_val_metrics, from the sorted
    gallery on (:160-188).

    ``sorted_index_names``: (queries, gallery) image names, best first, reference still included.
    Returns (group R@1, group R@2, group R@3, R@1, R@5, R@10, R@50), x100 as the original.
    """
    n_index = sorted_index_names.shape[1]
    # Delete the reference image from the results
    reference_mask = sorted_index_names != np.repeat(np.array(reference_names), n_index).reshape(
        len(target_names), -1)
    sorted_index_names = sorted_index_names[reference_mask].reshape(sorted_index_names.shape[0],
                                                                    sorted_index_names.shape[1] - 1)
    # Compute the ground-truth labels wrt the predictions
    labels = sorted_index_names == np.repeat(np.array(target_names), n_index - 1).reshape(len(target_names), -1)

    # Compute the subset predictions and ground-truth labels
    group_members = np.array(group_members)
    group_mask = (sorted_index_names[..., None] == group_members[:, None, :]).sum(-1).astype(bool)
    group_labels = labels[group_mask].reshape(labels.shape[0], -1)

    assert np.array_equal(np.sum(labels, axis=-1), np.ones(len(target_names)))
    assert np.array_equal(np.sum(group_labels, axis=-1), np.ones(len(target_names)))

    def recall(lab, k):
        return float(np.sum(lab[:, :k]) / len(lab)) * 100

    return (recall(group_labels, 1), recall(group_labels, 2), recall(group_labels, 3),
            recall(labels, 1), recall(labels, 5), recall(labels, 10), recall(labels, 50))


def fiq_val_metrics(sorted_index_names: np.ndarray, target_names: list[str]) -> tuple[float, float]:
    """ABaldrati/CLIP4Cir src/validate.py at commit 90013598, compute_fiq_val_metrics, from the sorted gallery
    on (:46-57): (R@10, R@50) x100."""
    labels = sorted_index_names == np.repeat(np.array(target_names), sorted_index_names.shape[1]).reshape(
        len(target_names), -1)
    assert np.array_equal(np.sum(labels, axis=-1), np.ones(len(target_names)))
    recall_at10 = float(np.sum(labels[:, :10]) / len(labels)) * 100
    recall_at50 = float(np.sum(labels[:, :50]) / len(labels)) * 100
    return recall_at10, recall_at50


def uniir_compute_recall_at_k(relevant_docs, retrieved_indices, k):
    """TIGER-AI-Lab/UniIR src/common/mbeir_retriever.py at commit 72871c19, compute_recall_at_k (:149-166)."""
    # Recall used by CLIP and BLIP codebase
    # Return 0 if there are no relevant documents
    if not relevant_docs:
        return 0.0
    top_k_retrieved_indices_set = set(retrieved_indices[:k])
    relevant_docs_set = set(relevant_docs)
    if relevant_docs_set.intersection(top_k_retrieved_indices_set):
        return 1.0
    else:
        return 0.0
