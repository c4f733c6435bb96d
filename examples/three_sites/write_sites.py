"""Three sites, each with data of its own, from data that installs with a package.

    python -m examples.three_sites.write_sites OUT [--fmnist DIR] [--images-per-site N]

writes
  OUT/fmnist/site_{a,b,c}/{train,test}/<class>/*.png   Fashion-MNIST (Debian's
      dataset-fashion-mnist) as image folders, each site holding its own mix of classes
      (label skew, drawn from a Dirichlet(0.5) per class) and its own size;
  OUT/cancer/site_a.csv, site_b.parquet, site_c/        scikit-learn's breast-cancer table
      split in three: a CSV file, a Parquet file and a Hugging Face dataset saved to disk;
and prints the commands that train on them. `--images-per-site 0` (the default) writes every
image; a smaller number keeps a quick trial quick.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from fl_system.data.files import DataError, read_idx_pair
from fl_system.data.locations import DEBIAN_FASHION_MNIST, DEBIAN_FASHION_MNIST_HINT

FMNIST_CLASSES = (
    "tshirt_top",
    "trouser",
    "pullover",
    "dress",
    "coat",
    "sandal",
    "shirt",
    "sneaker",
    "bag",
    "ankle_boot",
)
SITES = ("site_a", "site_b", "site_c")
CANCER_FEATURES = ("mean_radius", "mean_texture", "mean_perimeter", "mean_area", "mean_smoothness")


def site_shares(labels: np.ndarray, num_sites: int, seed: int, alpha: float = 0.5) -> np.ndarray:
    """Which site each record goes to: per class, shares drawn from Dirichlet(alpha)."""
    rng = np.random.default_rng(seed)
    owner = np.empty(len(labels), dtype=np.int64)
    shares = rng.dirichlet([alpha] * num_sites, size=int(labels.max()) + 1)
    for label, share in enumerate(shares):
        where = rng.permutation(np.flatnonzero(labels == label))
        cuts = (np.cumsum(share)[:-1] * len(where)).astype(int)
        for site, part in enumerate(np.split(where, cuts)):
            owner[part] = site
    return owner


def write_image_sites(
    root: Path, source: Path, limit: int, seed: int = 0, sites: tuple[str, ...] = SITES
) -> list[int]:
    """The Fashion-MNIST sites (one site: every image); how many training images each holds."""
    from PIL import Image

    counts = []
    parts = {
        "train": read_idx_pair(source, "train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
        "test": read_idx_pair(source, "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
    }
    owners = {
        p: site_shares(y, len(sites), seed + i) for i, (p, (_, y)) in enumerate(parts.items())
    }
    for s, site in enumerate(sites):
        for part, (x, y) in parts.items():
            mine = np.flatnonzero(owners[part] == s)
            if limit:
                mine = mine[: limit if part == "train" else max(limit // 6, 1)]
            for i in mine:
                folder = root / site / part / FMNIST_CLASSES[y[i]]
                folder.mkdir(parents=True, exist_ok=True)
                Image.fromarray(x[i]).save(folder / f"{i}.png")
            if part == "train":
                counts.append(len(mine))
    return counts


def write_table_sites(root: Path, seed: int = 0) -> list[int]:
    """The breast-cancer sites: CSV, Parquet, saved dataset; returns their row counts."""
    import datasets
    import pyarrow as pa
    import pyarrow.csv as pa_csv
    import pyarrow.parquet as pq
    from sklearn.datasets import load_breast_cancer

    datasets.disable_progress_bars()
    data = load_breast_cancer()
    columns = {name: data.data[:, i] for i, name in enumerate(CANCER_FEATURES)}
    names = [str(n) for n in data.target_names]
    table = pa.table({**columns, "diagnosis": [names[t] for t in data.target]})
    parts = np.array_split(np.random.default_rng(seed).permutation(table.num_rows), 3)
    root.mkdir(parents=True, exist_ok=True)
    pa_csv.write_csv(table.take(parts[0]), root / "site_a.csv")
    pq.write_table(table.take(parts[1]), root / "site_b.parquet")
    datasets.Dataset(table.take(parts[2])).save_to_disk(str(root / "site_c"))
    return [len(p) for p in parts]


def commands(out: Path) -> str:
    images = ",".join(str(out / "fmnist" / s) for s in SITES)
    tables = f"{out}/cancer/site_a.csv,{out}/cancer/site_b.parquet,{out}/cancer/site_c"
    features = ",".join(f"{c}:float" for c in CANCER_FEATURES)
    return (
        "fl-run runtime=local num_clients=3 dataset=images "
        f"dataset.classes=[{','.join(FMNIST_CLASSES)}] dataset.image_size=[28,28] "
        "dataset.normalize=federated evaluation=federated model=cnn "
        f"runtime.node_data=[{images}]\n"
        "fl-run runtime=local num_clients=3 dataset=table dataset.label_column=diagnosis "
        "dataset.classes=[malignant,benign] "
        f"'dataset.features={{{features}}}' dataset.normalize=federated "
        f"evaluation=federated evaluation.select=auroc model=mlp runtime.node_data=[{tables}]"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the folder to write the sites into")
    parser.add_argument("--fmnist", type=Path, default=Path(DEBIAN_FASHION_MNIST))
    parser.add_argument("--images-per-site", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        images = write_image_sites(args.out / "fmnist", args.fmnist, args.images_per_site)
    except DataError as err:
        print(f"write_sites: {err}; {DEBIAN_FASHION_MNIST_HINT}", file=sys.stderr)
        return 2
    rows = write_table_sites(args.out / "cancer")
    print(f"Fashion-MNIST sites: {images} training images; breast-cancer sites: {rows} rows")
    print(commands(args.out.resolve()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
