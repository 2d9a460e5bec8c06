"""Keeping the result cache across Colab runtimes: cmixlib.book.drive's save_results /
load_results, with a temporary folder standing in for Google Drive, on a real run of the
offline model."""
import pytest

from cmixlib.book import drive as book_drive


@pytest.mark.slow
@pytest.mark.filterwarnings("error::UserWarning")
def test_a_saved_run_loads_from_the_cache_of_a_fresh_runtime(tmp_path, monkeypatch):
    import cmixlib
    from cmixlib.experiments import run_experiment

    model = str(cmixlib.packaged_model_path())        # the offline model, by its folder
    drive = tmp_path / "drive"
    monkeypatch.setenv("CMIX_CACHE", str(tmp_path / "runtime-1"))
    monkeypatch.setenv("CMIX_DEVICE", "cpu")
    first = run_experiment("globenc-fig5-ln-outliers", model=model)
    assert not first.from_cache
    assert book_drive.save_results(drive) > 0
    assert book_drive.save_results(drive) == 0                  # nothing new the second time
    monkeypatch.setenv("CMIX_CACHE", str(tmp_path / "runtime-2"))
    assert book_drive.load_results(drive) > 0
    again = run_experiment("globenc-fig5-ln-outliers", model=model)
    assert again.from_cache
    assert again.result.equals(first.result)


def test_without_colab_a_folder_is_required(tmp_path):
    with pytest.raises(ValueError, match="Give a folder"):
        book_drive.save_results()
    with pytest.raises(FileNotFoundError, match="save_results"):
        book_drive.load_results(tmp_path / "nothing-here")
