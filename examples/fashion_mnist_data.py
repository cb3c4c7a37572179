"""Fashion-MNIST, the common command-line options and the batch schedule, shared by the Python
training examples (fashion_mnist_train.py: numpy MLP; pytorch_train.py: PyTorch ResNet).

Data: the gzipped IDX files of the Debian package ``dataset-fashion-mnist``. Every rank reads
them; a missing or damaged file ends every rank with exit status 2 and one message.
"""
import gzip
import os
import struct
import sys

import numpy as np

DEFAULT_DATA_DIR = "/usr/share/datasets/fashion-mnist"
DATA_PACKAGE = "dataset-fashion-mnist"
IDX_IMAGES_MAGIC = 0x00000803  # unsigned byte, 3 dimensions
IDX_LABELS_MAGIC = 0x00000801  # unsigned byte, 1 dimension
NUM_CLASSES = 10
# Mean and standard deviation of the training pixels (in [0, 1]).
PIXEL_MEAN = 0.2860
PIXEL_STD = 0.3530


def add_training_options(parser):
    """The options both examples take: data, epochs, seed, batch size and schedule, learning rate,
    momentum, label smoothing, training samples, JSON output."""
    parser.add_argument("--data", default=DEFAULT_DATA_DIR,
                        help="directory with the gzipped IDX files (default: %(default)s)")
    parser.add_argument("--epochs", type=int, default=2, help="default: %(default)s")
    parser.add_argument("--seed", type=int, default=1,
                        help="seed of the initial weights and of the shuffles "
                             "(default: %(default)s)")
    parser.add_argument("--batch", type=int, default=128,
                        help="global batch size, split across the ranks (default: %(default)s)")
    parser.add_argument("--batch-schedule", default=None,
                        help='batch sizes per epoch, e.g. "128:2,256" = 128 for 2 epochs, then '
                             '256; overrides --batch, learning rate scaled linearly')
    parser.add_argument("--lr", type=float, default=0.05,
                        help="learning rate at the first batch size (default: %(default)s)")
    parser.add_argument("--momentum", type=float, default=0.9, help="default: %(default)s")
    parser.add_argument("--label-smoothing", type=float, default=0.0,
                        help="label smoothing epsilon, 0 = off (default: %(default)s)")
    parser.add_argument("--train-samples", type=int, default=0,
                        help="train on the first N of the 60000 training images, "
                             "0 = all (default: %(default)s)")
    parser.add_argument("--json", metavar="FILE", default=None,
                        help="also write the configuration and results to FILE (rank 0)")


def set_epoch_batches(parser, args):
    """args.epoch_batches from --batch-schedule or --batch; a bad schedule is a usage error."""
    try:
        args.epoch_batches = batch_per_epoch(args.batch_schedule, args.batch, args.epochs)
    except ValueError as err:
        parser.error("--batch-schedule: %s" % err)


def batch_per_epoch(schedule, batch, epochs):
    """Global batch size of every epoch from a schedule like "256:2,512"
    (the last entry's epoch count may be left out: it lasts to the end)."""
    if schedule is None:
        phases = [(batch, epochs)]
    else:
        phases = []
        entries = schedule.split(",")
        for position, entry in enumerate(entries):
            size, _, count = entry.partition(":")
            if not count and position < len(entries) - 1:
                raise ValueError("only the last entry may omit ':EPOCHS'")
            phases.append((int(size), int(count) if count else epochs))
    batches = [size for size, count in phases for _ in range(count)][:epochs]
    batches += [phases[-1][0]] * (epochs - len(batches))
    if min(batches) < 1:
        raise ValueError("batch sizes must be positive")
    return batches


def read_idx(path, magic):
    """The array stored in a gzipped IDX file of unsigned bytes."""
    with gzip.open(path, "rb") as stream:
        raw = stream.read()
    ndim = magic & 0xFF
    found = struct.unpack(">I", raw[:4])[0] if len(raw) >= 4 else None
    if found != magic or len(raw) < 4 + 4 * ndim:
        raise ValueError("%s: magic number %s, expected 0x%08x (IDX, unsigned bytes, %d dims)"
                         % (path, "missing" if found is None else "0x%08x" % found, magic, ndim))
    shape = struct.unpack(">%dI" % ndim, raw[4:4 + 4 * ndim])
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != np.prod(shape):
        raise ValueError("%s: %d bytes of data for shape %s" % (path, data.size, shape))
    return data.reshape(shape)


def load_split(data_dir, split):
    """(images as uint8 [N, 28, 28], labels as int64 [N]) of "train" or "t10k"."""
    images = read_idx(os.path.join(data_dir, split + "-images-idx3-ubyte.gz"), IDX_IMAGES_MAGIC)
    labels = read_idx(os.path.join(data_dir, split + "-labels-idx1-ubyte.gz"), IDX_LABELS_MAGIC)
    if len(images) != len(labels):
        raise ValueError("%s: %d images but %d labels" % (split, len(images), len(labels)))
    return images, labels.astype(np.int64)


def load_dataset(comm, data_dir):
    """Train and test splits; every rank reads them, and all exit together on an error."""
    try:
        dataset = load_split(data_dir, "train"), load_split(data_dir, "t10k")
        error = None
    except FileNotFoundError as err:
        error = ("Fashion-MNIST not found: %s. Install the Debian package %s "
                 "(apt-get install %s) or pass --data DIR." % (err, DATA_PACKAGE, DATA_PACKAGE))
    except (OSError, ValueError) as err:
        error = "cannot read Fashion-MNIST: %s" % err
    errors = [e for e in comm.allgather(error) if e is not None]
    if errors:
        if comm.Get_rank() == 0:
            print("error: " + errors[0], file=sys.stderr)
        sys.exit(2)
    return dataset


def normalized(images):
    """uint8 pixels -> float32 with the training set's mean 0 and deviation 1, same shape."""
    return (images.astype(np.float32) * np.float32(1 / 255) - np.float32(PIXEL_MEAN)) \
        * np.float32(1 / PIXEL_STD)
