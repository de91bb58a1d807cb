from index.fixtures import (  # noqa: F401
    coco_index,
    coco_mbeir,
    coco_oracle_encoder,
    demo_images,
    demo_mbeir,
    tiny_encoder_spec,
)
