from index.fixtures import coco_index, coco_mbeir, coco_oracle_encoder  # noqa: F401
