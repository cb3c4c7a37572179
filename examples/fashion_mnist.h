/*
 * fashion_mnist.h: reads one split of Fashion-MNIST ("train" or "t10k") from its four gzipped IDX
 * files, as the Debian package dataset-fashion-mnist installs them in
 * /usr/share/datasets/fashion-mnist:
 *
 *   <split>-images-idx3-ubyte.gz   magic 0x00000803 (unsigned bytes, 3 dimensions), then the
 *                                  count, rows and columns as big-endian 32-bit integers, then the
 *                                  pixels, one byte each, image after image, row-major
 *   <split>-labels-idx1-ubyte.gz   magic 0x00000801 (unsigned bytes, 1 dimension), the count, then
 *                                  one byte per label, 0..9
 *
 * Errors come back as text that names the file and, when it is missing, the package to install.
 */
#ifndef GFSHIM_EXAMPLES_FASHION_MNIST_H_
#define GFSHIM_EXAMPLES_FASHION_MNIST_H_

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace fashion_mnist {

constexpr const char* kDefaultDirectory = "/usr/share/datasets/fashion-mnist";
constexpr const char* kDebianPackage = "dataset-fashion-mnist";
constexpr int kClasses = 10;
constexpr uint32_t kImagesMagic = 0x00000803;
constexpr uint32_t kLabelsMagic = 0x00000801;

struct Split {
  int count = 0;
  int pixelsPerImage = 0;       // rows x columns: 784
  std::vector<uint8_t> pixels;  // count x pixelsPerImage
  std::vector<uint8_t> labels;  // count, each < kClasses
};

// The header words that follow the magic number: counts of each dimension, big-endian.
inline bool readIdxHeader(gzFile file, const std::string& path, uint32_t expectedMagic,
                          int dimensions, uint32_t* sizes, std::string* error) {
  uint8_t header[16];
  int headerBytes = 4 * (1 + dimensions);
  if (gzread(file, header, static_cast<unsigned>(headerBytes)) != headerBytes) {
    *error = path + ": too short for an IDX header";
    return false;
  }
  auto bigEndianWord = [&](int word) {
    const uint8_t* bytes = header + 4 * word;
    return (uint32_t{bytes[0]} << 24) | (uint32_t{bytes[1]} << 16) | (uint32_t{bytes[2]} << 8) |
           uint32_t{bytes[3]};
  };
  if (bigEndianWord(0) != expectedMagic) {
    char text[96];
    snprintf(text, sizeof text, ": magic number 0x%08x, expected 0x%08x", bigEndianWord(0),
             expectedMagic);
    *error = path + text;
    return false;
  }
  for (int d = 0; d < dimensions; d++) sizes[d] = bigEndianWord(1 + d);
  return true;
}

inline bool readBytes(gzFile file, const std::string& path, size_t bytes, std::vector<uint8_t>* out,
                      std::string* error) {
  out->resize(bytes);
  size_t done = 0;
  while (done < bytes) {  // gzread takes an unsigned count: read in chunks
    unsigned chunk = static_cast<unsigned>(std::min<size_t>(bytes - done, 1u << 30));
    int got = gzread(file, out->data() + done, chunk);
    if (got <= 0) {
      *error = path + ": " + std::to_string(done) + " bytes of data, expected " +
               std::to_string(bytes) + " (truncated or corrupt file)";
      return false;
    }
    done += static_cast<size_t>(got);
  }
  return true;
}

inline gzFile openGzip(const std::string& path, std::string* error) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (!file) {
    *error = path + ": " + strerror(errno);
    if (errno == ENOENT) {
      *error += std::string(" (install the Debian package ") + kDebianPackage +
                ": apt-get install " + kDebianPackage +
                ", or pass --data DIR with the four -ubyte.gz files)";
    }
  }
  return file;
}

// Loads `split` ("train" or "t10k") from `directory`; false with *error set on any problem.
inline bool loadSplit(const std::string& directory, const std::string& split, Split* out,
                      std::string* error) {
  std::string imagesPath = directory + "/" + split + "-images-idx3-ubyte.gz";
  std::string labelsPath = directory + "/" + split + "-labels-idx1-ubyte.gz";

  gzFile images = openGzip(imagesPath, error);
  if (!images) return false;
  uint32_t imageSizes[3];
  bool ok = readIdxHeader(images, imagesPath, kImagesMagic, 3, imageSizes, error);
  if (ok && (imageSizes[0] == 0 || imageSizes[0] > (1u << 24) || imageSizes[1] != 28 ||
             imageSizes[2] != 28)) {
    *error = imagesPath + ": " + std::to_string(imageSizes[0]) + " images of " +
             std::to_string(imageSizes[1]) + "x" + std::to_string(imageSizes[2]) +
             ", expected 28x28 images";
    ok = false;
  }
  if (ok) {
    out->count = static_cast<int>(imageSizes[0]);
    out->pixelsPerImage = static_cast<int>(imageSizes[1] * imageSizes[2]);
    ok = readBytes(images, imagesPath, size_t(out->count) * size_t(out->pixelsPerImage),
                   &out->pixels, error);
  }
  gzclose(images);
  if (!ok) return false;

  gzFile labels = openGzip(labelsPath, error);
  if (!labels) return false;
  uint32_t labelCount = 0;
  ok = readIdxHeader(labels, labelsPath, kLabelsMagic, 1, &labelCount, error);
  if (ok && labelCount != imageSizes[0]) {
    *error = labelsPath + ": " + std::to_string(labelCount) + " labels for " +
             std::to_string(imageSizes[0]) + " images in " + imagesPath;
    ok = false;
  }
  if (ok) ok = readBytes(labels, labelsPath, labelCount, &out->labels, error);
  gzclose(labels);
  if (!ok) return false;
  for (size_t i = 0; i < out->labels.size(); i++) {
    if (out->labels[i] >= kClasses) {
      *error = labelsPath + ": label " + std::to_string(out->labels[i]) + " at index " +
               std::to_string(i) + ", expected 0.." + std::to_string(kClasses - 1);
      return false;
    }
  }
  return true;
}

}  // namespace fashion_mnist

#endif  // GFSHIM_EXAMPLES_FASHION_MNIST_H_
